package guard_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

func TestNestedSameKeyJoinsOuterTransaction(t *testing.T) {
	var acquired atomic.Int32
	e := newEnv(t, envConfig{guard: &guard.Options{Hooks: guard.Hooks{
		OnAcquired: func(string, uint64, time.Duration) { acquired.Add(1) },
	}}})
	ctx := context.Background()
	err := e.g.Do(ctx, "k", func(ctx context.Context, outer *guard.Tx) error {
		if err := increment(ctx, outer, 1); err != nil {
			return err
		}
		// Joins: same transaction, same token, no second lock (which would
		// wait for this very caller).
		err := e.g.Do(ctx, "k", func(ctx context.Context, inner *guard.Tx) error {
			if inner != outer {
				t.Error("nested Do on the same key got another transaction")
			}
			return increment(ctx, inner, 1)
		})
		if err != nil {
			return err
		}
		// A nested call that fails leaves none of its writes behind.
		err = e.g.Do(ctx, "k", func(ctx context.Context, inner *guard.Tx) error {
			if err := increment(ctx, inner, 1); err != nil {
				return err
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Errorf("failing nested Do = %v, want its error", err)
		}
		// A nested panic is rolled back too when the outer fn recovers it.
		func() {
			defer func() { _ = recover() }()
			_ = e.g.Do(ctx, "k", func(ctx context.Context, inner *guard.Tx) error {
				if err := increment(ctx, inner, 1); err != nil {
					return err
				}
				panic("nested")
			})
		}()
		return nil
	})
	must(t, err)
	if n := acquired.Load(); n != 1 {
		t.Fatalf("lock acquired %d times, want 1", n)
	}
	if n := e.counter(1); n != 2 {
		t.Fatalf("counter = %d, want 2 (outer + successful nested call)", n)
	}
}

func TestNestedSameKeyRollsBackWithOuter(t *testing.T) {
	e := newEnv(t, envConfig{})
	err := e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		if err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) || e.counter(1) != 0 {
		t.Fatalf("Do = %v, counter %d; want errBoom and 0", err, e.counter(1))
	}
}

func TestNestedOtherKeyLocksAndCommitsOnItsOwn(t *testing.T) {
	var acquired atomic.Int32
	e := newEnv(t, envConfig{guard: &guard.Options{Hooks: guard.Hooks{
		OnAcquired: func(string, uint64, time.Duration) { acquired.Add(1) },
	}}})
	err := e.g.Do(context.Background(), "a", func(ctx context.Context, outer *guard.Tx) error {
		if err := increment(ctx, outer, 1); err != nil {
			return err
		}
		err := e.g.Do(ctx, "b", func(ctx context.Context, inner *guard.Tx) error {
			if inner == outer || inner.Key() != "b" {
				t.Error("nested Do on another key joined the outer transaction")
			}
			return increment(ctx, inner, 2)
		})
		if err != nil {
			return err
		}
		return errBoom // the outer rolls back, the inner has committed
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Do = %v", err)
	}
	if acquired.Load() != 2 || e.counter(1) != 0 || e.counter(2) != 1 {
		t.Fatalf("acquired %d, counters %d %d; want 2, 0, 1", acquired.Load(), e.counter(1), e.counter(2))
	}
	e.assertFree("a")
	e.assertFree("b")
}

func TestNestedSameKeyOnConflictingGuardIsRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	other := guard.New(e.locker, openDB(t, e.dsn, func(c netConn) netConn { return c }), nil)
	err := e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		return other.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			t.Error("fn of a conflicting nested call ran")
			return nil
		})
	})
	if !errors.Is(err, guard.ErrReentry) {
		t.Fatalf("Do = %v, want ErrReentry", err)
	}
}

// A nested call's ctx is the outer fn's: once the outer Do has returned, a
// leaked ctx joins nothing.
func TestNestedCallAfterOuterReturnedFails(t *testing.T) {
	e := newEnv(t, envConfig{})
	var leaked context.Context
	must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { leaked = ctx; return nil }))
	err := e.g.Do(leaked, "k", func(ctx context.Context, tx *guard.Tx) error {
		t.Error("fn ran on a finished transaction")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with a leaked ctx = %v, want context.Canceled", err)
	}
}

// A nested call that does not pass fn's ctx is a new caller: it queues
// behind the lock its own caller holds (by default, behind the fence row the
// caller's transaction holds, once the lock was handed on at the claim) and
// gives up when its ctx ends (the documented reason to always pass fn's ctx
// on).
func TestNestedSameKeyWithForeignContextWaits(t *testing.T) {
	for _, handOff := range []guard.HandOff{guard.HandOffAuto, guard.HandOffAtEnd} {
		t.Run(handOff.String(), func(t *testing.T) { testNestedSameKeyWithForeignContextWaits(t, handOff) })
	}
}

func testNestedSameKeyWithForeignContextWaits(t *testing.T, handOff guard.HandOff) {
	e := newEnv(t, envConfig{guard: &guard.Options{HandOff: handOff}})
	err := e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		foreign, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := e.g.Do(foreign, "k", func(ctx context.Context, tx *guard.Tx) error {
			t.Error("a nested call without fn's ctx got the lock its caller holds")
			return nil
		})
		switch {
		case !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("nested Do with a foreign ctx = %v, want DeadlineExceeded", err)
		case handOff == guard.HandOffAtEnd && !errors.Is(err, redislock.ErrNotAcquired):
			t.Errorf("nested Do with a foreign ctx = %v, want ErrNotAcquired", err)
		case handOff != guard.HandOffAtEnd && !strings.Contains(err.Error(), ": claim: "):
			t.Errorf("nested Do with a foreign ctx = %v, want it to end waiting in its claim", err)
		}
		return increment(ctx, tx, 1)
	})
	must(t, err)
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1", n)
	}
}
