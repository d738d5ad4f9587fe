package guard_test

import (
	"context"
	"errors"
	"sync/atomic"
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
			var kills atomic.Int64
			e := newEnv(t, envConfig{guard: &c.opt, dial: func(c netConn) netConn { return countQueries(c, "KILL ", &kills) }})
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
			if n := kills.Load(); n != 1 {
				t.Fatalf("%d KILL statements sent, want 1: the left statement's session", n)
			}
		})
	}
}

// A session is ended on the server only when a statement of fn may have
// been left running there. A caller that gives up with no statement in
// flight, or a batch member that panics (its work undone, the connection
// back in the pool), sends no KILL: the pool's connection, perhaps already
// another caller's, must not be ended.
func TestNoKillWithoutAStatementLeftRunning(t *testing.T) {
	var kills atomic.Int64
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8},
		dial: func(c netConn) netConn { return countQueries(c, "KILL ", &kills) }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row

	dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer dcancel()
	err := e.g.Do(dctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		<-ctx.Done() // gives up between statements
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want context.DeadlineExceeded", err)
	}

	lk, err := e.locker.Lock(ctx, "k") // the members queue up as one batch
	must(t, err)
	panics := make(chan any, 2)
	for i := range 2 {
		go func() {
			defer func() { panics <- recover() }()
			_ = e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
				if err := increment(ctx, tx, 2); err != nil {
					return err
				}
				if i == 1 {
					panic("member 1")
				}
				return nil
			})
		}()
		waitFor(t, "caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
	}
	must(t, lk.Unlock(ctx))
	for range 2 {
		<-panics
	}
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	if n := kills.Load(); n != 0 {
		t.Fatalf("%d KILL statements sent, want 0", n)
	}
	if a, b := e.counter(1), e.counter(2); a != 1 || b != 1 {
		t.Fatalf("counters %d %d, want 1 1", a, b)
	}
}
