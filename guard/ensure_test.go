package guard_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// Three holders of a never-seen key at once, as after a split brain (three
// Lockers that do not share lock keys, one database). The first holder's
// transaction rolls back while the other two wait for its fence row. Had
// that transaction created the row, InnoDB would deadlock the two waiters
// (see fence.Ensure); Do creates the row before any transaction, so both
// proceed without a retry, each committing or being fenced.
func TestFirstClaimRollbackDoesNotDeadlockWaiters(t *testing.T) {
	var mu sync.Mutex
	var retries []error
	hooks := guard.Hooks{OnRetry: func(_ string, _ int, err error) {
		mu.Lock()
		retries = append(retries, err)
		mu.Unlock()
	}}
	e := newEnv(t, envConfig{guard: &guard.Options{Hooks: hooks}})
	guardIn := func() *guard.Guard {
		l := redislock.New(e.rdb, &redislock.Options{Prefix: testenv.Prefix(t)})
		t.Cleanup(func() { _ = l.Close() })
		return guard.New(l, e.db, &guard.Options{Hooks: hooks, Namespace: e.prefix})
	}
	const key = "never-seen"
	ctx := context.Background()

	results := make(chan error, 2)
	err := e.g.Do(ctx, key, func(context.Context, *guard.Tx) error {
		for range 2 {
			g := guardIn()
			go func() {
				// The outer ctx: these are independent callers, not nested ones.
				results <- g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
					return increment(ctx, tx, 1)
				})
			}()
		}
		waitFor(t, "both claims to wait for the first holder's fence row", func() bool {
			return e.running("INSERT INTO "+fence.Table) == 2
		})
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("first holder: Do = %v, want errBoom", err)
	}
	committed := 0
	for range 2 {
		switch err := <-results; {
		case err == nil:
			committed++
		case errors.Is(err, guard.ErrFenced):
		default:
			t.Errorf("waiter: Do = %v, want nil or ErrFenced", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retries) != 0 {
		t.Fatalf("waiters retried %d time(s), first: %v; want no deadlock at all", len(retries), retries[0])
	}
	if committed == 0 || e.counter(1) != committed {
		t.Fatalf("%d committed, counter %d", committed, e.counter(1))
	}
}
