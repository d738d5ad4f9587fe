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
		o.UnlockTimeout != 5*time.Second || o.SettleTimeout != 10*time.Second || o.TxOptions != nil || o.Logger == nil {
		t.Fatalf("defaults = %+v", o)
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
	} {
		_, err := c.o.withDefaults()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want one naming %q", c.o, err, c.want)
		}
	}
}
