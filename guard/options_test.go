package guard

import (
	"database/sql"
	"strings"
	"testing"
	"time"
)

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxAttempts != 3 || o.BackoffMin != 10*time.Millisecond || o.BackoffMax != 500*time.Millisecond ||
		o.UnlockTimeout != 5*time.Second || o.SettleTimeout != 10*time.Second || o.TxOptions != nil || o.Logger == nil ||
		o.HandOff != HandOffAuto || o.NoRelay {
		t.Fatalf("defaults = %+v", o)
	}
	// HandOffAuto hands the lock on at the claim until the pool check finds
	// a Galera node, and relaying is on.
	g := &Guard{opt: o}
	if !g.handsOffAtClaim() || !g.relaying() {
		t.Fatalf("defaults: hand-off at the claim %v, relaying %v; want both", g.handsOffAtClaim(), g.relaying())
	}
	g.dbCheck.multiPrimary.Store(true)
	if g.handsOffAtClaim() {
		t.Fatal("HandOffAuto on a Galera pool hands the lock on at the claim")
	}
	for h, want := range map[HandOff]bool{HandOffAtClaim: true, HandOffAtEnd: false} {
		g := &Guard{opt: Options{HandOff: h}}
		g.dbCheck.multiPrimary.Store(!want)
		if g.handsOffAtClaim() != want {
			t.Fatalf("%v: hand-off at the claim %v, want %v", h, !want, want)
		}
	}
	// A BackoffMin above the default maximum raises the maximum with it.
	o, err = Options{BackoffMin: time.Second}.withDefaults()
	if err != nil || o.BackoffMax != time.Second {
		t.Fatalf("BackoffMin 1s: max = %v, err = %v", o.BackoffMax, err)
	}
	// Values set are kept.
	o, err = Options{MaxAttempts: 1, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond,
		UnlockTimeout: time.Second, SettleTimeout: 2 * time.Second}.withDefaults()
	if err != nil || o.MaxAttempts != 1 || o.BackoffMin != time.Millisecond || o.BackoffMax != 2*time.Millisecond ||
		o.UnlockTimeout != time.Second || o.SettleTimeout != 2*time.Second {
		t.Fatalf("kept = %+v, %v", o, err)
	}
}

func TestOptionsInvalid(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{MaxAttempts: -1}, "MaxAttempts"},
		{Options{BackoffMin: -1}, "BackoffMin"},
		{Options{BackoffMax: -1}, "BackoffMax"},
		{Options{BackoffMin: time.Second, BackoffMax: time.Millisecond}, "below"},
		{Options{UnlockTimeout: -time.Second}, "UnlockTimeout"},
		{Options{SettleTimeout: -time.Second}, "SettleTimeout"},
		{Options{TxOptions: &sql.TxOptions{ReadOnly: true}}, "ReadOnly"},
		{Options{HandOff: HandOffAtEnd + 1}, "HandOff"},
		{Options{HandOff: -1}, "HandOff"},
	} {
		_, err := c.o.withDefaults()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want one naming %q", c.o, err, c.want)
		}
	}
}
