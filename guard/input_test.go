package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

func TestBadInputTouchesNothing(t *testing.T) {
	e := newEnv(t, envConfig{})
	fn := func(ctx context.Context, tx *guard.Tx) error {
		t.Error("fn called on bad input")
		return nil
	}
	var nilCtx context.Context
	var nilGuard *guard.Guard
	ctx := context.Background()
	for _, c := range []struct {
		name string
		do   func() error
		want []error
	}{
		{"nil Guard", func() error { return nilGuard.Do(ctx, "k", fn) }, []error{guard.ErrInvalidGuard}},
		{"zero Guard", func() error { return (&guard.Guard{}).Do(ctx, "k", fn) }, []error{guard.ErrInvalidGuard}},
		{"nil locker", func() error { return guard.New(nil, e.db, nil).Do(ctx, "k", fn) }, []error{guard.ErrInvalidGuard}},
		{"nil db", func() error { return guard.New(e.locker, nil, nil).Do(ctx, "k", fn) }, []error{guard.ErrInvalidGuard}},
		{"bad options", func() error {
			return guard.New(e.locker, e.db, &guard.Options{MaxAttempts: -1}).Do(ctx, "k", fn)
		}, []error{guard.ErrInvalidGuard, guard.ErrInvalidOptions}},
		{"nil ctx", func() error { return e.g.Do(nilCtx, "k", fn) }, []error{guard.ErrNilContext}},
		{"nil fn", func() error { return e.g.Do(ctx, "k", nil) }, []error{guard.ErrNilFunc}},
		{"empty key", func() error { return e.g.Do(ctx, "", fn) }, []error{guard.ErrInvalidKey, redislock.ErrInvalidKey}},
		{"long key", func() error { return e.g.Do(ctx, strings.Repeat("k", redislock.MaxKeyLen+1), fn) },
			[]error{guard.ErrInvalidKey, redislock.ErrInvalidKey}},
		{"invalid UTF-8 key", func() error { return e.g.Do(ctx, "k\xff", fn) }, []error{guard.ErrInvalidKey}},
	} {
		err := c.do()
		for _, want := range c.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: Do = %v, want %v", c.name, err, want)
			}
		}
	}
	// The longest valid key works.
	must(t, e.g.Do(ctx, strings.Repeat("k", redislock.MaxKeyLen), func(ctx context.Context, tx *guard.Tx) error { return nil }))
	if _, err := e.fence("k"); !errors.Is(err, fence.ErrNoFence) {
		t.Fatalf("bad input wrote a fence row: %v", err)
	}
	for _, k := range e.redisKeys() {
		if strings.Contains(k, "{k}") {
			t.Fatalf("bad input wrote Redis key %s", k)
		}
	}
}
