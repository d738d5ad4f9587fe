package guard_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// A Do nested in fn on another key works in database mode as in Redis mode:
// it rides on the slot of its enclosing call instead of waiting for one
// that only the enclosing call can free. With a pool of 3 the Guard allows
// one database-mode call at once.
func TestFallbackNestedDoOnSmallPool(t *testing.T) {
	f := newFBEnv(t, guard.Options{})
	f.db.SetMaxOpenConns(3)
	f.g = f.newGuard(guard.Options{FallbackAfter: 1})
	f.srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var innerMode guard.Mode = -1
	err := f.g.Do(ctx, "outer", func(ctx context.Context, tx *guard.Tx) error {
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		err := f.g.Do(ctx, "inner", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
		innerMode = f.lastMode()
		return err
	})
	if err != nil {
		t.Fatalf("Do with a nested Do in database mode: %v", err)
	}
	if innerMode != guard.ModeDatabase || f.lastMode() != guard.ModeDatabase {
		t.Fatalf("modes: inner %v, outer %v; want database", innerMode, f.lastMode())
	}
	if a, b := f.counter(1), f.counter(2); a != 1 || b != 1 {
		t.Fatalf("counters %d, %d; want 1, 1", a, b)
	}
}

// As many nesting callers as the Guard has database-mode slots, all inside
// their fn at once: each nested call, on one shared key, commits.
func TestFallbackNestedDoWithEverySlotHeld(t *testing.T) {
	const callers = 8 // the default FallbackMaxWaiters on an unlimited pool
	f := newFBEnv(t, guard.Options{FallbackAfter: 1, FallbackRetry: time.Minute})
	f.srv.Kill()
	// One call opens the breaker, so that the callers below go to the
	// database without dialling a dead Redis.
	must(t, f.do(t, 5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var arrived atomic.Int32
	all := make(chan struct{})
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.g.Do(ctx, fmt.Sprintf("outer-%d", i), func(ctx context.Context, tx *guard.Tx) error {
				if tx.Attempt() == 1 && arrived.Add(1) == callers {
					close(all)
				}
				select { // every caller holds its slot before any nests
				case <-all:
				case <-ctx.Done():
					return fmt.Errorf("waiting for the other callers: %w", context.Cause(ctx))
				}
				return f.g.Do(ctx, "inner", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
			})
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			t.Errorf("nesting caller: %v", err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d nesting callers failed", failed, callers)
	}
	if n := f.counter(2); n != callers {
		t.Fatalf("counter %d, want %d", n, callers)
	}
}
