package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// A nested Do on another key needs a second connection. With a pool of one,
// that connection is held by the enclosing Do itself, and the nested call
// would wait forever (with context.Background): it is refused at once.
func TestNestedDoOnAnotherKeyRefusedWhenPoolIsExhausted(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.db.SetMaxOpenConns(1)
	t.Cleanup(func() { e.db.SetMaxOpenConns(0) })
	ctx := context.Background()
	start := time.Now()
	var inner error
	must(t, e.g.Do(ctx, "outer", func(ctx context.Context, tx *guard.Tx) error {
		inner = e.g.Do(ctx, "inner", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
		return increment(ctx, tx, 1)
	}))
	if !errors.Is(inner, guard.ErrNestedPool) {
		t.Fatalf("nested Do = %v, want ErrNestedPool", inner)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	if a, b := e.counter(1), e.counter(2); a != 1 || b != 0 {
		t.Fatalf("counters %d, %d; want 1, 0", a, b)
	}
	e.assertFree("inner")
}

// An outer Do never retries an inner Do's failure. The inner transaction
// waits for a row the outer one wrote, which InnoDB cannot see as a
// deadlock: the inner Do's own attempts time out (1205) and it gives up;
// the outer fn returns that error, and the outer Do returns it at once
// instead of running the whole thing (and the inner retries) again.
func TestOuterDoDoesNotRetryInnerFailure(t *testing.T) {
	e := newEnv(t, envConfig{})
	short := openDB(t, e.dsn+"&innodb_lock_wait_timeout=1", func(c netConn) netConn { return c })
	g := guard.New(e.locker, short, &guard.Options{MaxAttempts: 2, BackoffMin: time.Millisecond, Namespace: e.prefix})
	ctx := context.Background()
	outerCalls, innerCalls := 0, 0
	start := time.Now()
	err := g.Do(ctx, "outer", func(ctx context.Context, tx *guard.Tx) error {
		outerCalls++
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		return g.Do(ctx, "inner", func(ctx context.Context, tx *guard.Tx) error {
			innerCalls++
			return increment(ctx, tx, 1) // waits for the outer transaction's row lock
		})
	})
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("Do = %v, want the inner lock wait timeout", err)
	}
	if outerCalls != 1 || innerCalls != 2 {
		t.Fatalf("outer fn ran %d times, inner %d; want 1 and 2 (the inner Do's own attempts only)", outerCalls, innerCalls)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter = %d, want 0", n)
	}
}

// An inner Do whose COMMIT was lost reports an outcome error. The outer Do
// must not take it for its own lost connection and run the inner work again.
func TestOuterDoDoesNotRetryInnerOutcomeError(t *testing.T) {
	faults := &connFaults{}
	e := newEnv(t, envConfig{dial: faults.wrap, guard: &guard.Options{BackoffMin: time.Millisecond}})
	ctx := context.Background()
	must(t, e.g.Do(ctx, "inner", func(ctx context.Context, tx *guard.Tx) error { return nil })) // fence row exists
	outerCalls := 0
	err := e.g.Do(ctx, "outer", func(ctx context.Context, tx *guard.Tx) error {
		outerCalls++
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		return e.g.Do(ctx, "inner", func(ctx context.Context, tx *guard.Tx) error {
			faults.dropCommit.Store(true)
			return increment(ctx, tx, 2)
		})
	})
	if !errors.Is(err, guard.ErrNotCommitted) {
		t.Fatalf("Do = %v, want the inner ErrNotCommitted", err)
	}
	if outerCalls != 1 {
		t.Fatalf("outer fn ran %d times, want 1", outerCalls)
	}
	if fence.Retryable(err) || fence.IsConnectionLost(err) {
		t.Fatalf("outcome error %v classifies as retryable/connection lost", err)
	}
	if a, b := e.counter(1), e.counter(2); a != 0 || b != 0 {
		t.Fatalf("counters %d, %d; want 0, 0", a, b)
	}
}
