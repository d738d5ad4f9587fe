package redislock

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults derived from other fields follow what the caller set, and an error
// names only fields the caller set, with the rule it breaks.
func TestOptionsDerivedDefaults(t *testing.T) {
	const h = time.Hour
	for _, c := range []struct {
		name string
		in   Options
		want Options // zero fields are not checked
	}{
		{"zero", Options{}, Options{LeaseTTL: 30 * time.Second, WaiterTimeout: 5 * time.Second,
			RecheckInterval: 5 * time.Second / 3, TokenTTL: 720 * h, ReplicaTimeout: time.Second}},
		{"long lease", Options{LeaseTTL: 744 * h}, Options{WaiterTimeout: 5 * time.Second, TokenTTL: 2 * 744 * h}},
		{"short lease", Options{LeaseTTL: 30 * time.Millisecond},
			Options{WaiterTimeout: 30 * time.Millisecond, RecheckInterval: 10 * time.Millisecond, TokenTTL: 720 * h}},
		{"tiny waiter timeout", Options{LeaseTTL: 30 * time.Millisecond, WaiterTimeout: 2 * time.Millisecond},
			Options{RecheckInterval: time.Millisecond}},
		{"waiter timeout above lease", Options{LeaseTTL: time.Second, WaiterTimeout: time.Minute},
			Options{WaiterTimeout: time.Second, RecheckInterval: time.Second / 3}},
		{"slow re-check", Options{RecheckInterval: 3 * time.Second},
			Options{WaiterTimeout: 9 * time.Second, RecheckInterval: 3 * time.Second}},
		{"slow re-check, short lease", Options{LeaseTTL: 100 * time.Millisecond, RecheckInterval: 40 * time.Millisecond},
			Options{WaiterTimeout: 100 * time.Millisecond}},
		{"token TTL set", Options{TokenTTL: h}, Options{TokenTTL: h}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.in.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				name      string
				got, want time.Duration
			}{{"LeaseTTL", got.LeaseTTL, c.want.LeaseTTL}, {"WaiterTimeout", got.WaiterTimeout, c.want.WaiterTimeout},
				{"RecheckInterval", got.RecheckInterval, c.want.RecheckInterval}, {"TokenTTL", got.TokenTTL, c.want.TokenTTL},
				{"ReplicaTimeout", got.ReplicaTimeout, c.want.ReplicaTimeout}} {
				if f.want != 0 && f.got != f.want {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
			if got.RecheckInterval < time.Millisecond || got.RecheckInterval > got.WaiterTimeout/2 ||
				got.WaiterTimeout > got.LeaseTTL || got.TokenTTL < got.LeaseTTL {
				t.Errorf("inconsistent result %+v", got)
			}
		})
	}
}

func TestOptionsErrorsNameWhatWasSet(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      Options
		mention []string // each must appear in the error
		avoid   []string // fields not set, which must not be named
	}{
		{"tiny lease", Options{LeaseTTL: time.Millisecond}, []string{"LeaseTTL", "30ms"}, nil},
		{"tiny waiter timeout", Options{WaiterTimeout: time.Millisecond}, []string{"WaiterTimeout", "2ms"},
			[]string{"RecheckInterval", "LeaseTTL"}},
		{"re-check too slow for waiter timeout", Options{WaiterTimeout: time.Second, RecheckInterval: 600 * time.Millisecond},
			[]string{"RecheckInterval", "WaiterTimeout"}, []string{"LeaseTTL"}},
		{"re-check too slow for lease", Options{LeaseTTL: 100 * time.Millisecond, RecheckInterval: 60 * time.Millisecond},
			[]string{"RecheckInterval", "LeaseTTL"}, []string{"WaiterTimeout"}},
		{"re-check too slow for default lease", Options{RecheckInterval: 20 * time.Second},
			[]string{"RecheckInterval", "15s"}, []string{"WaiterTimeout", "LeaseTTL"}},
		{"re-check too fast", Options{RecheckInterval: time.Microsecond}, []string{"RecheckInterval", "1ms"},
			[]string{"WaiterTimeout", "LeaseTTL"}},
		{"token TTL below default lease", Options{TokenTTL: time.Second}, []string{"TokenTTL", "30s"},
			[]string{"LeaseTTL"}},
		{"token TTL below lease", Options{TokenTTL: time.Hour, LeaseTTL: 2 * time.Hour}, []string{"TokenTTL", "LeaseTTL"}, nil},
		{"negative", Options{WaiterTimeout: -time.Second}, []string{"WaiterTimeout", "negative"}, nil},
		{"tiny replica timeout", Options{ReplicaTimeout: time.Microsecond}, []string{"ReplicaTimeout", "1ms"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.in.withDefaults()
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("%v, want ErrInvalidOptions", err)
			}
			for _, s := range c.mention {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not mention %q", err, s)
				}
			}
			for _, s := range c.avoid {
				if strings.Contains(err.Error(), s) {
					t.Errorf("%q names %s, which was not set", err, s)
				}
			}
		})
	}
}

// Every duration option refuses a value that cannot work, such as 5 meant as
// 5s (5ns), and a negative one, with an *OptionError naming the field and the
// value, which Locker.Err returns right after New.
func TestEveryDurationOptionRejectsWrongUnit(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer rdb.Close()
	fields := map[string]func(*Options) *time.Duration{
		"LeaseTTL":        func(o *Options) *time.Duration { return &o.LeaseTTL },
		"WaiterTimeout":   func(o *Options) *time.Duration { return &o.WaiterTimeout },
		"RecheckInterval": func(o *Options) *time.Duration { return &o.RecheckInterval },
		"TokenTTL":        func(o *Options) *time.Duration { return &o.TokenTTL },
		"ReplicaTimeout":  func(o *Options) *time.Duration { return &o.ReplicaTimeout },
	}
	// Every duration field of Options is in the table.
	typ := reflect.TypeOf(Options{})
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Type == reflect.TypeOf(time.Duration(0)) && fields[f.Name] == nil {
			t.Errorf("duration field %s is not tested", f.Name)
		}
	}
	for name, field := range fields {
		for _, v := range []time.Duration{5, 999 * time.Microsecond, -time.Second} {
			t.Run(fmt.Sprintf("%s=%v", name, v), func(t *testing.T) {
				var o Options
				*field(&o) = v
				l := New(rdb, &o)
				err := l.Err()
				var oe *OptionError
				if !errors.As(err, &oe) || !errors.Is(err, ErrInvalidOptions) {
					t.Fatalf("Err() = %v, want an *OptionError matching ErrInvalidOptions", err)
				}
				if oe.Field != name || oe.Value != v {
					t.Errorf("OptionError{Field: %q, Value: %v}, want %q, %v", oe.Field, oe.Value, name, v)
				}
				if msg := err.Error(); !strings.Contains(msg, name+" "+v.String()) {
					t.Errorf("%q does not name %s %v", msg, name, v)
				}
				if _, lerr := l.Lock(testCtx(t), "k"); lerr != err {
					t.Errorf("Lock: %v, want Err()'s %v", lerr, err)
				}
			})
		}
	}
}

// Locker.Err reports every invalid Options field and nothing for a valid
// Locker, without contacting Redis.
func TestLockerErr(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer rdb.Close()
	for _, c := range []struct {
		opt   *Options
		field string
		value any
	}{
		{&Options{Prefix: "app{1}"}, "Prefix", "app{1}"},
		{&Options{MinReplicas: -1}, "MinReplicas", -1},
		{&Options{RecheckInterval: 3 * time.Second, WaiterTimeout: 4 * time.Second}, "RecheckInterval", 3 * time.Second},
	} {
		err := New(rdb, c.opt).Err()
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != c.field || oe.Value != c.value {
			t.Errorf("%+v: Err() = %#v, want an *OptionError for %s = %v", c.opt, err, c.field, c.value)
		}
	}
	if err := New(rdb, nil).Err(); err != nil {
		t.Errorf("defaults: Err() = %v", err)
	}
	l := New(rdb, &Options{LeaseTTL: time.Minute})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("closed Locker: Err() = %v, want nil (nothing wrong with how it was made)", err)
	}
	if err := New(nil, nil).Err(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil client: Err() = %v", err)
	}
	if err := (*Locker)(nil).Err(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil *Locker: Err() = %v", err)
	}
}
