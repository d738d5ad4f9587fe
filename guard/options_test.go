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

// groupTwins pairs every field of the option groups with the deprecated flat
// field it replaces, a valid value other than the default, and another one.
var groupTwins = []struct {
	group, flat string
	v, other    any
}{
	{"Outage.Fallback", "Fallback", FallbackDatabase, Fallback(2)},
	{"Outage.After", "FallbackAfter", 5, 6},
	{"Outage.Retry", "FallbackRetry", 2 * time.Second, 3 * time.Second},
	{"Outage.ProbeAfter", "FallbackProbeAfter", 300 * time.Millisecond, time.Second},
	{"Outage.ProbeTimeout", "FallbackProbeTimeout", 400 * time.Millisecond, time.Second},
	{"Outage.MaxWaiters", "FallbackMaxWaiters", 5, 6},
	{"Outage.MaxWaitersPerKey", "FallbackMaxWaitersPerKey", 3, 4},
	{"Batch.Max", "MaxBatch", 8, 9},
	{"Batch.Savepoints", "BatchSavepoints", true, nil},
	{"Succession.HandOff", "HandOff", HandOffAtEnd, HandOffAtClaim},
	{"Succession.NoRelay", "NoRelay", true, nil},
}

// field returns the field of o at path, such as "Batch.Max".
func field(o *Options, path string) reflect.Value {
	v := reflect.ValueOf(o).Elem()
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
	}
	return v
}

// setField sets the field of o at path to v.
func setField(t *testing.T, o *Options, path string, v any) {
	t.Helper()
	f := field(o, path)
	if !f.IsValid() {
		t.Fatalf("Options has no field %s", path)
	}
	f.Set(reflect.ValueOf(v))
}

// normalised returns o as New keeps it, on a pool of 16 connections.
func normalised(t *testing.T, o Options) Options {
	t.Helper()
	o.Logger = slog.New(slog.DiscardHandler)
	o, err := o.withDefaults()
	if err == nil {
		o, err = o.withPool(16)
	}
	if err != nil {
		t.Fatalf("%+v: %v", o, err)
	}
	return o
}

// assertTwinsAgree fails unless every group field of o holds the value of
// the flat field it replaces.
func assertTwinsAgree(t *testing.T, o Options) {
	t.Helper()
	for _, tw := range groupTwins {
		if g, f := field(&o, tw.group).Interface(), field(&o, tw.flat).Interface(); g != f {
			t.Errorf("normalised: %s = %v but %s = %v", tw.group, g, tw.flat, f)
		}
	}
}

// Every field of a group is listed in groupTwins, and so checked below.
func TestOptionGroupsAllListed(t *testing.T) {
	listed := map[string]bool{}
	for _, tw := range groupTwins {
		listed[tw.group] = true
	}
	typ := reflect.TypeOf(Options{})
	for _, group := range []string{"Outage", "Batch", "Succession"} {
		f, _ := typ.FieldByName(group)
		for i := range f.Type.NumField() {
			if name := group + "." + f.Type.Field(i).Name; !listed[name] {
				t.Errorf("%s has no flat twin in groupTwins", name)
			}
		}
	}
}

// Setting a group field gives the same normalised options as setting the
// flat field it replaces, field by field and all at once, with the Guard's
// database fallback off and on; group and flat fields agree afterwards.
func TestOptionGroupsMatchFlatFields(t *testing.T) {
	for _, fallback := range []Fallback{FallbackNone, FallbackDatabase} {
		var allGroup, allFlat Options
		for _, tw := range groupTwins {
			group, flat := Options{Fallback: fallback}, Options{Fallback: fallback}
			setField(t, &group, tw.group, tw.v)
			setField(t, &flat, tw.flat, tw.v)
			setField(t, &allGroup, tw.group, tw.v)
			setField(t, &allFlat, tw.flat, tw.v)
			g, f := normalised(t, group), normalised(t, flat)
			g.Logger, f.Logger = nil, nil
			if !reflect.DeepEqual(g, f) {
				t.Errorf("fallback %v, %s = %v: normalised\n%+v\nwith %s:\n%+v", fallback, tw.group, tw.v, g, tw.flat, f)
			}
			assertTwinsAgree(t, g)
			if got := field(&g, tw.group).Interface(); got != tw.v {
				t.Errorf("fallback %v: %s = %v after normalising, want %v", fallback, tw.group, got, tw.v)
			}
			// The same value in both is accepted.
			setField(t, &group, tw.flat, tw.v)
			if both := normalised(t, group); field(&both, tw.group).Interface() != tw.v {
				t.Errorf("%s and %s both %v: got %v", tw.group, tw.flat, tw.v, field(&both, tw.group).Interface())
			}
		}
		g, f := normalised(t, allGroup), normalised(t, allFlat)
		g.Logger, f.Logger = nil, nil
		if !reflect.DeepEqual(g, f) {
			t.Errorf("every group field set: normalised\n%+v\nwith the flat fields:\n%+v", g, f)
		}
		assertTwinsAgree(t, g)
	}
}

// The zero value still gives today's defaults, now in the groups too.
func TestOptionGroupsZeroValue(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	wantOutage := OutageOptions{Fallback: FallbackNone, After: 3, Retry: time.Second, ProbeAfter: 250 * time.Millisecond,
		ProbeTimeout: 250 * time.Millisecond, MaxWaitersPerKey: 2}
	if o.Outage != wantOutage || o.Batch != (BatchOptions{}) || o.Succession != (SuccessionOptions{}) {
		t.Fatalf("zero value: Outage %+v, Batch %+v, Succession %+v; want %+v and zero groups", o.Outage, o.Batch, o.Succession, wantOutage)
	}
	assertTwinsAgree(t, o)
	g := &Guard{opt: o}
	if !g.handsOffAtClaim() || !g.relaying() || g.opt.MaxBatch != 0 {
		t.Fatalf("zero value: hand-off at the claim %v, relaying %v, MaxBatch %d", g.handsOffAtClaim(), g.relaying(), g.opt.MaxBatch)
	}
	// The pool decides MaxWaiters, in both places.
	p, err := (Options{Outage: OutageOptions{Fallback: FallbackDatabase}}).withDefaults()
	if err == nil {
		p, err = p.withPool(4)
	}
	if err != nil || p.FallbackMaxWaiters != 2 || p.Outage.MaxWaiters != 2 || p.Outage.MaxWaitersPerKey != 2 {
		t.Fatalf("pool of 4: MaxWaiters %d/%d, per key %d, err %v; want 2", p.FallbackMaxWaiters, p.Outage.MaxWaiters, p.Outage.MaxWaitersPerKey, err)
	}
}

// A group field and its flat twin set to different values are refused with
// an *OptionError naming both.
func TestOptionGroupsConflict(t *testing.T) {
	locker, db := offlineParts(t, nil)
	for _, tw := range groupTwins {
		if tw.other == nil {
			continue // a bool's only non-zero value is true: both set agree
		}
		var o Options
		setField(t, &o, tw.group, tw.v)
		setField(t, &o, tw.flat, tw.other)
		_, err := o.withDefaults()
		var oe *OptionError
		if !errors.As(err, &oe) || !errors.Is(err, ErrInvalidOptions) || oe.Field != tw.group || oe.Value != tw.v ||
			!strings.Contains(err.Error(), "Options."+tw.flat+" is ") {
			t.Errorf("%s = %v, %s = %v: err = %v, want an *OptionError for %s naming %s", tw.group, tw.v, tw.flat, tw.other, err, tw.group, tw.flat)
			continue
		}
		if gerr := New(locker, db, &o).Err(); !errors.Is(gerr, ErrInvalidOptions) || !strings.Contains(gerr.Error(), "Options."+tw.group) {
			t.Errorf("%s conflict: Err() = %v", tw.group, gerr)
		}
	}
}

// An invalid value is reported under the name of the field it was set in.
func TestOptionGroupsInvalidValueNamesTheFieldSet(t *testing.T) {
	for _, c := range []struct {
		path string
		v    any
	}{
		{"Outage.Fallback", Fallback(7)}, {"Fallback", Fallback(7)},
		{"Outage.After", -1}, {"FallbackAfter", -1},
		{"Outage.Retry", time.Duration(5)}, {"FallbackRetry", time.Duration(5)},
		{"Outage.ProbeAfter", -time.Second}, {"Outage.ProbeTimeout", 999 * time.Microsecond},
		{"Outage.MaxWaiters", -1}, {"FallbackMaxWaiters", -1},
		{"Outage.MaxWaitersPerKey", -1}, {"FallbackMaxWaitersPerKey", -1},
		{"Batch.Max", -1}, {"MaxBatch", -1},
		{"Succession.HandOff", HandOffAtEnd + 1}, {"HandOff", HandOff(-1)},
	} {
		var o Options
		setField(t, &o, c.path, c.v)
		_, err := o.withDefaults()
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != c.path || oe.Value != c.v {
			t.Errorf("%s = %v: err = %v, want an *OptionError for %s", c.path, c.v, err, c.path)
		}
	}
	// Every duration of a group is checked, as the top-level ones are.
	typ := reflect.TypeOf(Options{})
	for _, group := range []string{"Outage", "Batch", "Succession"} {
		f, _ := typ.FieldByName(group)
		for i := range f.Type.NumField() {
			if sf := f.Type.Field(i); sf.Type == reflect.TypeOf(time.Duration(0)) {
				var o Options
				setField(t, &o, group+"."+sf.Name, time.Duration(5))
				var oe *OptionError
				if _, err := o.withDefaults(); !errors.As(err, &oe) || oe.Field != group+"."+sf.Name {
					t.Errorf("%s.%s = 5ns: err = %v", group, sf.Name, err)
				}
			}
		}
	}
	// More waiters than the pool holds: named as set, by New too.
	locker, _ := offlineParts(t, nil)
	small := sqlx.NewDb(sql.OpenDB(offline{}), "mysql")
	defer small.Close()
	small.SetMaxOpenConns(4)
	for _, o := range []Options{
		{Outage: OutageOptions{Fallback: FallbackDatabase, MaxWaiters: 5}},
		{Fallback: FallbackDatabase, FallbackMaxWaiters: 5},
		{Outage: OutageOptions{Fallback: FallbackDatabase}, FallbackMaxWaiters: 5},
	} {
		want := "Options.Outage.MaxWaiters is 5"
		if o.FallbackMaxWaiters != 0 {
			want = "Options.FallbackMaxWaiters is 5"
		}
		if err := New(locker, small, &o).Err(); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: Err() = %v, want one saying %q", o, err, want)
		}
	}
}
