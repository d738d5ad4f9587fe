package guard_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// An fn that reads through the pool, outside its transaction, while the
// key's next holder in this process has been granted the lock: the next
// holder must not take the pool's last connection for a claim that would
// wait for this fn's COMMIT, or fn waits for the pool while the claim waits
// for fn, until innodb_lock_wait_timeout.
func TestFnReadingThroughThePoolIsNotStalledByTheNextHolder(t *testing.T) {
	for _, relay := range []bool{true, false} {
		name := "relay"
		if !relay {
			name = "no-relay"
		}
		t.Run(name, func(t *testing.T) {
			var acquired atomic.Int64
			e := newEnv(t, envConfig{guard: &guard.Options{NoRelay: !relay, Hooks: guard.Hooks{
				OnAcquired: func(string, uint64, time.Duration) { acquired.Add(1) },
			}}})
			outer, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ctx := outer
			must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row
			e.db.SetMaxOpenConns(2)
			acquired.Store(0)

			next := make(chan error, 1)
			var readErr error
			err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
				if err := increment(ctx, tx, 1); err != nil {
					return err
				}
				go func() {
					next <- e.g.Do(outer, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
				}()
				// The lock was handed on at the claim: the next holder is
				// granted it while this fn runs.
				waitFor(t, "the next holder to be granted the lock", func() bool { return acquired.Load() == 2 })
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				defer rcancel()
				var n int
				readErr = e.db.GetContext(rctx, &n, "SELECT n FROM counters WHERE id = 2")
				return readErr
			})
			if readErr != nil {
				t.Fatalf("fn's read through the pool: %v; the next holder's claim held the pool's last connection", readErr)
			}
			must(t, err)
			must(t, <-next)
			if n := e.counter(1); n != 2 {
				t.Fatalf("counter %d, want 2", n)
			}
		})
	}
}
