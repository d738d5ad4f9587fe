package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// A caller that gives up while a statement of fn waits on the server for
// a row lock does not leave the key stuck. The driver closes the socket of
// a statement whose ctx ended, but the server thread goes on waiting, and
// its transaction keeps the fence row's lock: without a KILL, the key's
// next holder would wait until the row came free or innodb_lock_wait_timeout
// passed (50s by default; the test gives it 5s). The ctx that ends is Do's,
// or only the statement's own.
func TestAFnStatementLeftByItsCallerDoesNotHoldTheKey(t *testing.T) {
	for _, c := range []struct {
		name     string
		stmtOnly bool // only the statement's ctx ends, not Do's
		opt      guard.Options
	}{
		{"Do's ctx", false, guard.Options{}},
		{"the statement's ctx", true, guard.Options{}},
		{"Do's ctx, claim rides", false, guard.Options{ClaimWithFirstStatement: true}},
		{"the statement's ctx, handoff at end", true, *atEnd(guard.Options{})},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envConfig{guard: &c.opt})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row
			other, err := e.db.BeginTxx(ctx, nil)
			must(t, err)
			defer other.Rollback()
			_, err = other.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 2")
			must(t, err)

			dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			if c.stmtOnly {
				dctx = ctx
			}
			err = e.g.Do(dctx, "k", func(fctx context.Context, tx *guard.Tx) error {
				if err := increment(fctx, tx, 1); err != nil { // claimed, and a first change
					return err
				}
				if c.stmtOnly {
					sctx, scancel := context.WithTimeout(fctx, 300*time.Millisecond)
					defer scancel()
					fctx = sctx
				}
				_, err := tx.ExecContext(fctx, "UPDATE counters SET n = n + 1 WHERE id = 2")
				return err
			})
			dcancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Do = %v, want context.DeadlineExceeded", err)
			}

			nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
			defer ncancel()
			if err := e.g.Do(nctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }); err != nil {
				t.Fatalf("the next holder of the key: %v; want it through while the left statement would still run", err)
			}
			if n := e.counter(1); n != 1 {
				t.Fatalf("counter 1 = %d, want 1: the call that gave up must have changed nothing", n)
			}
		})
	}
}
