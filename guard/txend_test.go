package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// splitGuard returns a Guard on e's database and fence namespace whose locks
// live apart from e's (another Locker prefix), as after a split brain: its
// holder gets the lock while e's holder still runs, with a larger token.
func splitGuard(t *testing.T, e *env, opt guard.Options) *guard.Guard {
	t.Helper()
	l := redislock.New(e.rdb, &redislock.Options{Prefix: testenv.Prefix(t)})
	t.Cleanup(func() { _ = l.Close() })
	opt.Namespace = e.prefix
	return guard.New(l, e.db, &opt)
}

// A statement inside fn that would end the transaction (explicitly, or by
// the implicit commit of DDL and the like) is refused before it is sent:
// the claim stays in force, nothing is committed early, and Do rolls back
// and returns ErrImplicitCommit even when fn ignores the statement's error.
func TestStatementsThatEndTheTransactionAreRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	for _, stmt := range []string{
		"START TRANSACTION",
		"BEGIN",
		"COMMIT",
		"ROLLBACK",
		"CREATE TABLE IF NOT EXISTS made_in_fn (id INT)",
		"/* migration */ create table made_in_fn2 (id int)",
		"ALTER TABLE counters ADD COLUMN z INT",
		"TRUNCATE TABLE counters",
		"LOCK TABLES counters WRITE",
		"SET autocommit = 1",
	} {
		var stmtErr error
		err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			_, stmtErr = tx.ExecContext(ctx, stmt)
			// fn ignores the error and goes on writing.
			return increment(ctx, tx, 2)
		})
		if !errors.Is(stmtErr, guard.ErrImplicitCommit) {
			t.Errorf("%s: ExecContext = %v, want ErrImplicitCommit", stmt, stmtErr)
		}
		if !errors.Is(err, guard.ErrImplicitCommit) {
			t.Errorf("%s: Do = %v, want ErrImplicitCommit", stmt, err)
		}
	}
	if a, b := e.counter(1), e.counter(2); a != 0 || b != 0 {
		t.Fatalf("counters %d, %d after refused Do calls; want 0, 0 (nothing may commit)", a, b)
	}
	var tables int
	must(t, e.db.Get(&tables, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'made_in_fn%'"))
	if tables != 0 {
		t.Fatalf("%d tables created by refused statements", tables)
	}
	if f, err := e.fence("k"); err != nil || f.Claims != 0 {
		t.Fatalf("fence %+v, %v: want no committed claim", f, err)
	}
	e.assertFree("k")

	// The other statement methods refuse too, and sqlx helpers called with
	// the Tx go through them.
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		var n int
		if err := tx.GetContext(ctx, &n, "COMMIT"); !errors.Is(err, guard.ErrImplicitCommit) {
			t.Errorf("GetContext(COMMIT) = %v", err)
		}
		if _, err := tx.PrepareContext(ctx, "DROP TABLE counters"); !errors.Is(err, guard.ErrImplicitCommit) {
			t.Errorf("PrepareContext(DROP TABLE) = %v", err)
		}
		if rows, err := tx.QueryContext(ctx, "BEGIN"); !errors.Is(err, guard.ErrImplicitCommit) {
			t.Errorf("QueryContext(BEGIN) = %v", err)
			if rows != nil {
				_ = rows.Close()
			}
		}
		if err := tx.QueryRowContext(ctx, "COMMIT").Scan(&n); err == nil {
			t.Error("QueryRowContext(COMMIT).Scan succeeded")
		}
		return nil
	})
	if !errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("Do = %v, want ErrImplicitCommit", err)
	}
}

// A stale holder runs START TRANSACTION inside fn,
// a newer holder claims and writes, then the stale holder writes. The stale
// write must not land, and the stale Do must not return nil.
func TestStartTransactionInFnCannotLetAStaleWriteLand(t *testing.T) {
	e := newEnv(t, envConfig{})
	newer := splitGuard(t, e, guard.Options{})
	ctx := context.Background()

	newerDone := make(chan error, 1)
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		_, _ = tx.ExecContext(ctx, "START TRANSACTION")
		go func() {
			// Not fn's ctx: an independent caller, not a nested one.
			newerDone <- newer.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
				return increment(ctx, tx, 1)
			})
		}()
		// Either the newer holder's claim waits for this transaction's fence
		// row (the claim is still in force), or it went through because the
		// claim was committed early.
		waitFor(t, "the newer holder to claim or to wait for the fence row", func() bool {
			return e.running("UPDATE "+fence.Table) == 1 || len(newerDone) == 1
		})
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = 100 WHERE id = 1")
		return err
	})
	if err == nil || !errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("stale holder: Do = %v, want ErrImplicitCommit", err)
	}
	if err := <-newerDone; err != nil {
		t.Fatalf("newer holder: Do = %v", err)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1: only the newer holder's increment may land", n)
	}
}

// A statement whose effect the text does not show (a stored procedure that
// commits) is caught right after it runs: what follows is refused, and Do
// returns ErrImplicitCommit instead of committing writes made outside the
// claimed transaction.
func TestOpaqueStatementThatCommitsIsCaught(t *testing.T) {
	e := newEnv(t, envConfig{})
	testenv.MustExec(t, e.db, "CREATE PROCEDURE commit_inside() BEGIN COMMIT; END")
	testenv.MustExec(t, e.db, "CREATE PROCEDURE harmless() BEGIN UPDATE counters SET n = n + 10 WHERE id = 2; END")
	ctx := context.Background()

	var afterErr error
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		_, callErr := tx.ExecContext(ctx, "CALL commit_inside()")
		if !errors.Is(callErr, guard.ErrImplicitCommit) {
			t.Errorf("CALL commit_inside() = %v, want ErrImplicitCommit", callErr)
		}
		afterErr = increment(ctx, tx, 2)
		return nil
	})
	if !errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("Do = %v, want ErrImplicitCommit", err)
	}
	if afterErr == nil || !strings.Contains(afterErr.Error(), "no longer usable") {
		t.Fatalf("statement after the procedure = %v, want it refused", afterErr)
	}
	if n := e.counter(2); n != 0 {
		t.Fatalf("counter 2 = %d: a write after the implicit commit landed", n)
	}

	// A procedure that stays inside the transaction is fine.
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		_, err := tx.ExecContext(ctx, "CALL harmless()")
		return err
	}))
	if n := e.counter(2); n != 10 {
		t.Fatalf("counter 2 = %d after harmless procedure, want 10", n)
	}
	e.assertFree("k")
}

// Options.Namespace: Lockers with different prefixes sharing one schema hold
// separate locks on a key, so their fence rows are separate too. A token
// floor raised in one namespace neither fences the other nor leaks into it.
func TestNamespacesKeepFenceRowsApart(t *testing.T) {
	e := newEnv(t, envConfig{})
	other := redislock.New(e.rdb, &redislock.Options{Prefix: testenv.Prefix(t)})
	t.Cleanup(func() { _ = other.Close() })
	g2 := guard.New(other, e.db, nil)
	ctx := context.Background()
	inc := func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }

	// Namespace 2 runs far ahead (a floor fed back after a failover).
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	must(t, other.RaiseTokenFloor(ctx, "k", future))
	must(t, g2.Do(ctx, "k", inc))
	// Namespace 1, whose tokens follow the clock, is not fenced by it.
	for range 2 {
		if err := e.g.Do(ctx, "k", inc); err != nil {
			t.Fatalf("namespace 1: Do = %v, want nil", err)
		}
	}
	f1, err := e.fence("k")
	must(t, err)
	f2, err := fence.Lookup(ctx, e.db, g2.FenceResource("k"))
	must(t, err)
	if f1.Resource == f2.Resource || f1.Claims != 2 || f2.Claims != 1 || f1.Token >= future || f2.Token <= future {
		t.Fatalf("fence rows %+v and %+v: want separate rows, 2 and 1 claims", f1, f2)
	}
	if n := e.counter(1); n != 3 {
		t.Fatalf("counter = %d, want 3", n)
	}
}
