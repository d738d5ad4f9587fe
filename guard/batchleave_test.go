package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// Members of a batch that leave while their statement runs on the shared
// connection must not break the batch: the driver would close the
// connection of a statement whose ctx ended, ending the transaction of every
// member and counting against the batch's attempts (with three or four
// departures, the member that stayed got "giving up after 3 attempts"
// without its fn ever running). A leaving member's statement is ended on
// the server alone (KILL QUERY), its work undone, and the batch goes on.
func TestBatchMembersLeavingMidStatement(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row

	// Row 3 stays locked by another transaction: the leavers' statements
	// wait for it until their callers leave.
	testenvExec(t, e, "INSERT INTO counters VALUES (3, 0)")
	blocker, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer func() { _ = blocker.Rollback() }()
	if _, err := blocker.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 3"); err != nil {
		t.Fatal(err)
	}

	lk, err := e.locker.Lock(ctx, "k")
	must(t, err)
	const leavers = 4
	errs := make(chan error, leavers+1)
	for i := range leavers {
		lctx, lcancel := context.WithCancel(ctx)
		defer lcancel()
		go func() {
			errs <- e.g.Do(lctx, "k", func(ctx context.Context, tx *guard.Tx) error {
				if err := increment(ctx, tx, 2); err != nil {
					return err
				}
				go func() {
					// The caller leaves once its statement runs on the server.
					waitFor(t, "the leaving member's statement to wait", func() bool { return e.running("SELECT n FROM counters WHERE id = 3") == 1 })
					lcancel()
				}()
				var n int
				return tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = 3 FOR UPDATE")
			})
		}()
		waitFor(t, "the caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
	}
	stayed := 0
	go func() {
		errs <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			stayed++
			return increment(ctx, tx, 1)
		})
	}()
	waitFor(t, "the last caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == leavers+1 })
	must(t, lk.Unlock(ctx))

	var left, ok int
	for range leavers + 1 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, context.Canceled):
			left++
		default:
			t.Errorf("Do: %v, want nil or context.Canceled", err)
		}
	}
	if ok != 1 || left != leavers {
		t.Fatalf("%d callers committed and %d left, want 1 and %d", ok, left, leavers)
	}
	if stayed != 1 {
		t.Fatalf("the member that stayed ran %d times, want 1: the leavers broke the batch's transaction", stayed)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 1 || n2 != 0 {
		t.Fatalf("counters %d and %d, want 1 and 0: the leavers' work must be undone, the stayer's kept", n1, n2)
	}
}

func testenvExec(t *testing.T, e *env, q string) {
	t.Helper()
	if _, err := e.db.Exec(q); err != nil {
		t.Fatal(err)
	}
}
