package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// In database mode, as in Redis mode once the lock is handed on, fn's ctx
// ends as soon as its transaction is lost: the fence row's lock went with
// it, so the key's next caller may already run. fn, waiting on its ctx
// while one of its statements meets the loss, stops; Do runs it again.
func TestFallbackTxLossEndsFnCtx(t *testing.T) {
	f := newFBEnv(t, guard.Options{FallbackAfter: 1, FallbackRetry: time.Minute})
	f.srv.Kill()
	must(t, f.do(t, 5*time.Second)) // opens the breaker and makes the fence row
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var cause, stmtErr error
	err := f.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if tx.Attempt() > 1 {
			return increment(ctx, tx, 1)
		}
		var id int64
		if err := tx.GetContext(ctx, &id, "SELECT CONNECTION_ID()"); err != nil {
			return err
		}
		testenv.MustExec(t, f.db, fmt.Sprintf("KILL %d", id))
		done := make(chan error, 1)
		go func() {
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 2")
			done <- err
		}()
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(5 * time.Second):
			stmtErr = <-done
			return fmt.Errorf("fn's ctx still alive 5s after its transaction was lost (statement: %v)", stmtErr)
		}
		stmtErr = <-done
		return ctx.Err()
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	if f.lastMode() != guard.ModeDatabase {
		t.Fatalf("mode %v, want database", f.lastMode())
	}
	if stmtErr == nil || cause == nil || errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		t.Fatalf("fn's ctx ended with %v after the statement's %v; want the loss of the transaction", cause, stmtErr)
	}
	if a, b := f.counter(1), f.counter(2); a != 2 || b != 0 {
		t.Fatalf("counters %d, %d; want 2, 0", a, b)
	}
}
