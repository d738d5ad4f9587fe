package guard

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/redislock"
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

// offline is a database that is never reached: New only reads its pool
// settings.
type offline struct{}

func (offline) Open(string) (driver.Conn, error)             { return nil, errors.New("offline") }
func (offline) Connect(context.Context) (driver.Conn, error) { return nil, errors.New("offline") }
func (o offline) Driver() driver.Driver                      { return o }

// offlineParts returns a Locker and a DB that New accepts and nothing
// contacts.
func offlineParts(t *testing.T, lopt *redislock.Options) (*redislock.Locker, *sqlx.DB) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	l := redislock.New(rdb, lopt)
	db := sqlx.NewDb(sql.OpenDB(offline{}), "mysql")
	t.Cleanup(func() { _ = l.Close(); _ = rdb.Close(); _ = db.Close() })
	return l, db
}

// Every duration option refuses a value that cannot work, such as 5 meant as
// 5s (5ns, with which every unlock would be dropped), and a negative one:
// withDefaults with an *OptionError naming the field and the value, and
// Guard.Err right after New with an error saying the same.
func TestEveryDurationOptionRejectsWrongUnit(t *testing.T) {
	var o Options
	listed := map[string]bool{}
	for _, d := range o.durations() {
		listed[d.name] = true
	}
	typ := reflect.TypeOf(o)
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Type == reflect.TypeOf(time.Duration(0)) && !listed[f.Name] {
			t.Errorf("duration field %s is not checked", f.Name)
		}
	}
	locker, db := offlineParts(t, nil)
	for name := range listed {
		for _, v := range []time.Duration{5, 999 * time.Microsecond, -time.Second} {
			t.Run(fmt.Sprintf("%s=%v", name, v), func(t *testing.T) {
				var o Options
				reflect.ValueOf(&o).Elem().FieldByName(name).SetInt(int64(v))
				_, err := o.withDefaults()
				var oe *OptionError
				if !errors.As(err, &oe) || !errors.Is(err, ErrInvalidOptions) {
					t.Fatalf("withDefaults: %v, want an *OptionError matching ErrInvalidOptions", err)
				}
				if oe.Field != name || oe.Value != v {
					t.Errorf("OptionError{Field: %q, Value: %v}, want %q, %v", oe.Field, oe.Value, name, v)
				}
				gerr := New(locker, db, &o).Err()
				want := fmt.Sprintf("Options.%s is %v", name, v)
				if !errors.Is(gerr, ErrInvalidGuard) || !errors.Is(gerr, ErrInvalidOptions) || !strings.Contains(gerr.Error(), want) {
					t.Errorf("Err() = %v, want ErrInvalidOptions saying %q", gerr, want)
				}
			})
		}
		// The shortest value that can work is accepted.
		var ok Options
		reflect.ValueOf(&ok).Elem().FieldByName(name).SetInt(int64(time.Millisecond))
		if _, err := ok.withDefaults(); err != nil {
			t.Errorf("%s = 1ms: %v", name, err)
		}
	}
}

// Guard.Err reports, before any call, whatever would make every Do fail:
// invalid options, a nil or invalid Locker, a nil DB, a Guard not made by New.
func TestGuardErr(t *testing.T) {
	locker, db := offlineParts(t, nil)
	if err := New(locker, db, nil).Err(); err != nil {
		t.Fatalf("valid Guard: Err() = %v", err)
	}
	badLocker, _ := offlineParts(t, &redislock.Options{LeaseTTL: 5})
	var loe *redislock.OptionError
	if err := New(badLocker, db, nil).Err(); !errors.Is(err, ErrInvalidGuard) || !errors.As(err, &loe) || loe.Field != "LeaseTTL" {
		t.Errorf("invalid Locker: Err() = %v, want ErrInvalidGuard and the Locker's *redislock.OptionError", err)
	}
	small := sqlx.NewDb(sql.OpenDB(offline{}), "mysql")
	defer small.Close()
	small.SetMaxOpenConns(4)
	for name, c := range map[string]struct {
		g    *Guard
		want []error
		text string
	}{
		"MaxAttempts":        {New(locker, db, &Options{MaxAttempts: -1}), []error{ErrInvalidGuard, ErrInvalidOptions}, "Options.MaxAttempts is -1"},
		"Namespace":          {New(locker, db, &Options{Namespace: "a{b"}), []error{ErrInvalidGuard, ErrInvalidOptions}, `Options.Namespace is "a{b"`},
		"FallbackMaxWaiters": {New(locker, small, &Options{Fallback: FallbackDatabase, FallbackMaxWaiters: 5}), []error{ErrInvalidOptions}, "Options.FallbackMaxWaiters is 5"},
		"nil locker":         {New(nil, db, nil), []error{ErrInvalidGuard}, "nil *redislock.Locker"},
		"nil db":             {New(locker, nil, nil), []error{ErrInvalidGuard}, "nil *sqlx.DB"},
		"nil guard":          {nil, []error{ErrInvalidGuard}, "nil *Guard"},
		"zero guard":         {&Guard{}, []error{ErrInvalidGuard}, "guard.New"},
	} {
		err := c.g.Err()
		for _, want := range c.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: Err() = %v, want %v", name, err, want)
			}
		}
		if err != nil && !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %q does not say %q", name, err, c.text)
		}
	}
}

// Without Options.Logger, warnings go to slog.Default() and debug records
// nowhere; a Logger that is set is kept.
func TestDefaultLoggerWarnsThroughSlogDefault(t *testing.T) {
	var out bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	o.Logger.Debug("guard: committed", "key", "k")
	o.Logger.Info("guard: Redis answers again")
	o.Logger.Warn("guard: lock lost", "key", "k")
	if got := out.String(); !strings.Contains(got, `level=WARN msg="guard: lock lost" key=k`) ||
		strings.Contains(got, "committed") || strings.Contains(got, "answers again") {
		t.Fatalf("slog.Default() got %q, want the warning only", got)
	}
	own := slog.New(slog.DiscardHandler)
	if o, _ := (Options{Logger: own}).withDefaults(); o.Logger != own {
		t.Fatal("the Logger set was replaced")
	}
}
