package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/redfence/redfence/guard"
)

// In a batch, each member's Tx ends when its own fn returns, as a Do's Tx
// does without batching: a statement run through a Tx kept past fn is
// refused with sql.ErrTxDone, instead of running inside the next member's
// work, where that member's rollback would undo it or its commit would
// apply it under a caller that had already been told its outcome.
func TestBatchMemberTxEndsWithItsFn(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 4}})
	ctx := context.Background()
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row

	lk, err := e.locker.Lock(ctx, "k")
	must(t, err)
	var kept *guard.Tx
	var keptErr error
	var mu sync.Mutex
	first := func(ctx context.Context, tx *guard.Tx) error {
		mu.Lock()
		kept = tx
		mu.Unlock()
		return increment(ctx, tx, 1)
	}
	second := func(ctx context.Context, tx *guard.Tx) error {
		mu.Lock()
		k := kept
		mu.Unlock()
		if k == nil {
			t.Error("the second member ran before the first")
			return nil
		}
		// The first member's Tx, used after its fn returned.
		_, keptErr = k.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2")
		return increment(ctx, tx, 1)
	}
	errs := make(chan error, 2)
	go func() { errs <- e.g.Do(ctx, "k", first) }()
	waitFor(t, "the first caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == 1 })
	go func() { errs <- e.g.Do(ctx, "k", second) }()
	waitFor(t, "the second caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == 2 })
	if _, b := guard.BatchMembers(e.g, "k"); b != 1 {
		t.Fatalf("%d batches, want 1", b)
	}
	must(t, lk.Unlock(ctx))
	must(t, <-errs)
	must(t, <-errs)
	if !errors.Is(keptErr, sql.ErrTxDone) {
		t.Fatalf("statement through a member's Tx kept past its fn: %v, want sql.ErrTxDone", keptErr)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 2 || n2 != 0 {
		t.Fatalf("counters %d and %d, want 2 and 0", n1, n2)
	}
}
