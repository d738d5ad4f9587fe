package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// Tx does not see the errors of statements fn prepared or bound with Stmt,
// nor those of the *sqlx.Tx Unsafe returns. When one of them meets an error
// that rolled the transaction back (here a write conflict under snapshot
// isolation, 1020) and fn goes on, what fn runs after it must not commit:
// it runs in another transaction (autocommit is off), which Do rolls back
// once the server has shown that the transaction COMMIT would commit is not
// the one that claimed. Nothing of the attempt applied, so Do runs it again;
// here every attempt meets the conflict, and Do ends with ErrNotCommitted.
func TestUnwatchedStatementRollbackIsCaught(t *testing.T) {
	for _, bind := range []string{"prepare", "stmt", "unsafe"} {
		for _, then := range []string{"statement", "return", "return-error"} {
			t.Run(bind+"/"+then, func(t *testing.T) {
				testUnwatchedStatementRollbackIsCaught(t, bind, then, 0)
			})
		}
	}
	t.Run("prepare/statement/batch", func(t *testing.T) {
		testUnwatchedStatementRollbackIsCaught(t, "prepare", "statement", 16)
	})
}

func testUnwatchedStatementRollbackIsCaught(t *testing.T, bind, then string, maxBatch int) {
	e, ctx := fencedEnv(t, envConfig{guard: &guard.Options{MaxBatch: maxBatch}}, "unwatched")
	dbStmt, err := e.db.PrepareContext(ctx, "UPDATE counters SET n = ? WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	defer dbStmt.Close()

	var conflict, next error
	attempts := 0
	err = e.g.Do(ctx, "unwatched", func(ctx context.Context, tx *guard.Tx) error {
		attempts = tx.Attempt()
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_snapshot_isolation = ON"); err != nil {
			t.Fatalf("this test needs MariaDB 10.6.18, 10.11.8, 11.x or later (innodb_snapshot_isolation): %v", err)
		}
		var exec func(ctx context.Context, n int) (sql.Result, error)
		switch bind {
		case "prepare":
			st, err := tx.PrepareContext(ctx, "UPDATE counters SET n = ? WHERE id = 1")
			if err != nil {
				return err
			}
			exec = func(ctx context.Context, n int) (sql.Result, error) { return st.ExecContext(ctx, n) }
		case "stmt":
			st := tx.StmtContext(ctx, dbStmt)
			exec = func(ctx context.Context, n int) (sql.Result, error) { return st.ExecContext(ctx, n) }
		default:
			utx := tx.Unsafe()
			exec = func(ctx context.Context, n int) (sql.Result, error) {
				return utx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = 1", n)
			}
		}
		var n int
		if err := tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = 1"); err != nil {
			return err
		}
		// A writer outside the fence changes the row meanwhile.
		if _, err := e.db.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 1"); err != nil {
			return err
		}
		_, conflict = exec(ctx, n+1) // fn treats it as best effort and goes on
		switch then {
		case "statement":
			_, next = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2")
		case "return-error":
			return conflict // Do cannot tell whether fn ran more of them after it
		}
		return nil
	})
	var me *mysql.MySQLError
	if !errors.As(conflict, &me) || me.Number != 1020 {
		t.Fatalf("the conflicting write returned %v, want error 1020", conflict)
	}
	if then == "statement" && next != nil {
		t.Logf("statement after the rollback: %v", next)
	}
	if !errors.Is(err, guard.ErrNotCommitted) || errors.Is(err, guard.ErrOutcomeUnknown) || errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("Do: %v, want ErrNotCommitted: the transaction had been rolled back, and nothing after it committed", err)
	}
	if fence.Retryable(err) || fence.IsConnectionLost(err) {
		t.Fatalf("Do: %v looks retryable to a caller", err)
	}
	if attempts != 3 {
		t.Fatalf("fn ran %d times, want 3 (MaxAttempts): nothing of an attempt applied, so each may run again", attempts)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 10*attempts || n2 != 0 {
		t.Fatalf("counters %d and %d, want %d and 0: a write of fn ran outside the fence", n1, n2, 10*attempts)
	}
}

// Prepared statements that run cleanly cost no check of their own (the
// check before COMMIT covers them): Do commits.
func TestUnwatchedStatementsCommit(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		err := e.g.Do(ctx, "unwatched-ok", func(ctx context.Context, tx *guard.Tx) error {
			st, err := tx.PreparexContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = ?")
			if err != nil {
				return err
			}
			if _, err := st.ExecContext(ctx, 1); err != nil {
				return err
			}
			return increment(ctx, tx, 2)
		})
		must(t, err)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 3 || n2 != 3 {
		t.Fatalf("counters %d and %d, want 3 and 3", n1, n2)
	}
}

// A procedure that commits the fenced transaction and then fails: the
// check of an opaque statement runs whether it failed or not. fn must not go
// on outside the fence, Do must not return fn's error alone as if nothing
// had applied, and a batch must not undo and run again its other members'
// work, which committed.
func TestOpaqueStatementThatCommitsThenFails(t *testing.T) {
	for _, maxBatch := range []int{0, 8} {
		t.Run(fmt.Sprintf("MaxBatch=%d", maxBatch), func(t *testing.T) {
			e, ctx := fencedEnv(t, envConfig{guard: &guard.Options{MaxBatch: maxBatch}}, "commit-fail", "CREATE PROCEDURE commit_then_fail() BEGIN COMMIT; "+
				"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'after commit'; END")
			var next error
			failing := func(ctx context.Context, tx *guard.Tx) error {
				_, err := tx.ExecContext(ctx, "CALL commit_then_fail()")
				if err == nil {
					t.Error("CALL commit_then_fail() returned no error")
				}
				_, next = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2")
				return err
			}
			if maxBatch == 0 {
				err := e.g.Do(ctx, "commit-fail", func(ctx context.Context, tx *guard.Tx) error {
					if err := increment(ctx, tx, 1); err != nil {
						return err
					}
					return failing(ctx, tx)
				})
				if !errors.Is(err, guard.ErrImplicitCommit) {
					t.Fatalf("Do: %v, want ErrImplicitCommit: the procedure committed the transaction", err)
				}
			} else {
				errs := queued(t, e, e.g, "commit-fail", []txFn{
					func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) },
					failing,
				})
				if !errors.Is(errs[0], guard.ErrOutcomeUnknown) {
					t.Fatalf("first member: %v, want ErrOutcomeUnknown: its work committed with another member's statement", errs[0])
				}
				if !errors.Is(errs[1], guard.ErrImplicitCommit) {
					t.Fatalf("second member: %v, want ErrImplicitCommit", errs[1])
				}
			}
			if next == nil {
				t.Error("the statement after the procedure ran: the transaction had ended")
			}
			if n1, n2 := e.counter(1), e.counter(2); n1 != 1 || n2 != 0 {
				t.Fatalf("counters %d and %d, want 1 and 0: work applied twice or outside the fence", n1, n2)
			}
		})
	}
}

// A procedure that commits and then fails with an error Do retries (here a
// signalled deadlock): the attempt must not run again, since its work
// committed. One that rolls back and then fails that way is run again.
func TestOpaqueStatementEndsThenFailsRetryably(t *testing.T) {
	for _, h := range []guard.HandOff{guard.HandOffAuto, guard.HandOffAtEnd} {
		for _, end := range []string{"COMMIT", "ROLLBACK"} {
			for _, via := range []string{"exec", "query", "queryrow"} {
				t.Run(h.String()+"/"+end+"/"+via, func(t *testing.T) {
					testOpaqueStatementEndsThenFailsRetryably(t, h, end, via)
				})
			}
		}
	}
}

func testOpaqueStatementEndsThenFailsRetryably(t *testing.T, h guard.HandOff, end, via string) {
	e, ctx := fencedEnv(t, envConfig{guard: &guard.Options{HandOff: h}}, "end-deadlock", "CREATE PROCEDURE end_then_deadlock(IN a INT) BEGIN IF a = 1 THEN "+end+"; "+
		"SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'deadlock'; END IF; END")
	attempts := 0
	err := e.g.Do(ctx, "end-deadlock", func(ctx context.Context, tx *guard.Tx) error {
		attempts = tx.Attempt()
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		switch via {
		case "exec":
			_, err := tx.ExecContext(ctx, "CALL end_then_deadlock(?)", tx.Attempt())
			return err
		case "query":
			rows, err := tx.QueryContext(ctx, "CALL end_then_deadlock(?)", tx.Attempt())
			if err == nil {
				err = rows.Close()
			}
			return err
		default:
			var x int
			err := tx.QueryRowContext(ctx, "CALL end_then_deadlock(?)", tx.Attempt()).Scan(&x)
			if errors.Is(err, sql.ErrNoRows) {
				return nil // the second attempt: the procedure does nothing
			}
			return err
		}
	})
	if end == "COMMIT" {
		if !errors.Is(err, guard.ErrImplicitCommit) || attempts != 1 {
			t.Fatalf("Do: %v after %d attempts, want ErrImplicitCommit after 1: the first attempt committed", err, attempts)
		}
		if fence.Retryable(err) || fence.IsConnectionLost(err) {
			t.Fatalf("Do: %v looks retryable to a caller, though the attempt committed", err)
		}
	} else if err != nil || attempts != 2 {
		t.Fatalf("Do: %v after %d attempts, want nil after 2: the first attempt was rolled back", err, attempts)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter %d, want 1", n)
	}
}

// A lock lost after an unseen rollback: fn's statements after the rollback
// ran in a transaction Do rolls back, and Do says that nothing applied.
func TestUnwatchedRollbackThenLockLost(t *testing.T) {
	e := newEnv(t, envConfig{
		lock:  &redislock.Options{LeaseTTL: 300 * time.Millisecond},
		guard: atEnd(guard.Options{}),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must(t, e.g.Do(ctx, "lost", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row
	err := e.g.Do(ctx, "lost", func(fctx context.Context, tx *guard.Tx) error {
		if _, err := tx.ExecContext(fctx, "SET SESSION innodb_snapshot_isolation = ON"); err != nil {
			t.Fatalf("this test needs MariaDB 10.6.18, 10.11.8, 11.x or later (innodb_snapshot_isolation): %v", err)
		}
		st, err := tx.PrepareContext(fctx, "UPDATE counters SET n = n + ? WHERE id = ?")
		if err != nil {
			return err
		}
		var n int
		if err := tx.GetContext(fctx, &n, "SELECT n FROM counters WHERE id = 1"); err != nil {
			return err
		}
		if _, err := e.db.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 1"); err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, 1, 1); err == nil { // 1020: rolled back, unseen
			t.Error("the conflicting write returned no error")
		}
		_, _ = st.ExecContext(ctx, 1000, 2) // runs in another transaction, never committed
		must(t, e.rdb.Del(context.Background(), e.names("lost").Lock).Err())
		<-fctx.Done() // the lock is lost
		return nil
	})
	if !errors.Is(err, guard.ErrNotCommitted) || errors.Is(err, guard.ErrOutcomeUnknown) {
		t.Fatalf("Do: %v, want ErrNotCommitted: nothing of fn committed", err)
	}
	if n := e.counter(2); n != 0 {
		t.Fatalf("counter 2 = %d, want 0: a statement after the rollback committed outside the fence", n)
	}
}

// A procedure that commits (which ends the session, see session.go) while
// the key's next holder waits to claim the fence row: the next holder's
// claim goes through and names this attempt's as the one it replaced, so
// the row tells that the attempt committed. Do must neither run the attempt
// again nor say nothing applied: it reports the commit.
func TestOpaqueStatementCommitsThenNextHolderClaims(t *testing.T) {
	e, ctx := fencedEnv(t, envConfig{}, "next")
	name := e.prefix + ":next"
	if _, err := e.db.ExecContext(ctx, "CREATE PROCEDURE commit_wait_fail(IN a INT, IN name VARCHAR(200)) BEGIN "+
		"IF a = 1 THEN COMMIT; DO GET_LOCK(name, 20); DO RELEASE_LOCK(name); "+
		"SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'deadlock'; END IF; END"); err != nil {
		t.Fatal(err)
	}
	held := holdNamedLock(t, e, name) // until the next holder has committed
	other := make(chan error, 1)
	attempts := 0
	err := e.g.Do(ctx, "next", func(ctx context.Context, tx *guard.Tx) error {
		attempts = tx.Attempt()
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		if tx.Attempt() == 1 {
			go func() {
				err := e.g.Do(context.Background(), "next", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
				_, _ = held.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", name)
				other <- err
			}()
		}
		_, err := tx.ExecContext(ctx, "CALL commit_wait_fail(?, ?)", tx.Attempt(), name)
		return err
	})
	if oerr := <-other; oerr != nil {
		t.Fatalf("the next holder's Do: %v", oerr)
	}
	if !errors.Is(err, guard.ErrImplicitCommit) || attempts != 1 {
		t.Fatalf("Do: %v after %d attempts, want ErrImplicitCommit after 1", err, attempts)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 1 || n2 != 1 {
		t.Fatalf("counters %d and %d, want 1 and 1", n1, n2)
	}
}

// A connection lost during an opaque statement that did not commit is
// settled on a fresh connection, as a lost COMMIT is: the attempt runs again.
func TestOpaqueStatementConnectionLostIsSettled(t *testing.T) {
	e, ctx := fencedEnv(t, envConfig{}, "killed")
	name := e.prefix + ":killed"
	if _, err := e.db.ExecContext(ctx, "CREATE PROCEDURE wait_named(IN a INT, IN name VARCHAR(200)) BEGIN "+
		"IF a = 1 THEN DO GET_LOCK(name, 20); END IF; END"); err != nil {
		t.Fatal(err)
	}
	holdNamedLock(t, e, name) // makes the first CALL wait until it is killed
	attempts := 0
	err := e.g.Do(ctx, "killed", func(ctx context.Context, tx *guard.Tx) error {
		attempts = tx.Attempt()
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		if tx.Attempt() == 1 {
			var id int64
			if err := tx.GetContext(ctx, &id, "SELECT CONNECTION_ID()"); err != nil {
				return err
			}
			go func() {
				// Killed once it waits in the CALL (or after 10 s, when
				// the test fails anyway).
				for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
					var n int
					if e.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST "+
						"WHERE ID = ? AND STATE = 'User lock'", id) == nil && n == 1 {
						break
					}
				}
				_, _ = e.db.ExecContext(ctx, "KILL ?", id)
			}()
		}
		_, err := tx.ExecContext(ctx, "CALL wait_named(?, ?)", tx.Attempt(), name)
		return err
	})
	if err != nil || attempts != 2 {
		t.Fatalf("Do: %v after %d attempts, want nil after 2: the killed attempt did not commit", err, attempts)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter %d, want 1", n)
	}
}

// holdNamedLock takes the server's named lock name on a connection of its
// own, held until the test ends or the returned connection releases it.
func holdNamedLock(t *testing.T, e *env, name string) *sql.Conn {
	t.Helper()
	conn, err := e.db.Conn(context.Background())
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	var got int
	if err := conn.QueryRowContext(context.Background(), "SELECT GET_LOCK(?, 5)", name).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK(%q): %d, %v", name, got, err)
	}
	return conn
}

// The caller's ctx ends during an opaque statement that does not commit:
// database/sql ends the transaction under Tx and drops its connection. The
// server notices when the statement ends and rolls the transaction back,
// and the fence row, read on a fresh connection within a second, shows
// that nothing committed.
func TestOpaqueStatementCtxEndsIsSettled(t *testing.T) {
	e := newEnv(t, envConfig{})
	must(t, e.g.Do(context.Background(), "ctx-ends", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row
	if _, err := e.db.ExecContext(context.Background(), "CREATE PROCEDURE sleep_briefly() BEGIN DO SLEEP(0.3); END"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := e.g.Do(ctx, "ctx-ends", func(fctx context.Context, tx *guard.Tx) error {
		if err := increment(fctx, tx, 1); err != nil {
			return err
		}
		var id int64
		if err := tx.GetContext(fctx, &id, "SELECT CONNECTION_ID()"); err != nil {
			return err
		}
		go func() {
			// Cancelled once the CALL waits (or after 10 s, when the test
			// fails anyway).
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				var n int
				if e.db.GetContext(context.Background(), &n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST "+
					"WHERE ID = ? AND STATE = 'User sleep'", id) == nil && n == 1 {
					break
				}
			}
			cancel()
		}()
		_, err := tx.ExecContext(fctx, "CALL sleep_briefly()")
		return err
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrOutcomeUnknown) {
		t.Fatalf("Do: %v, want context.Canceled and a settled outcome: nothing committed", err)
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter %d, want 0", n)
	}
}

// An opaque statement run through a Query form that committed the
// transaction must not let fn go on outside the fence: its COMMIT ends the
// session (see session.go), so fn's next statement fails, and Do reports
// the commit.
func TestOpaqueQueryThatCommitsStopsTheNextStatement(t *testing.T) {
	e, ctx := fencedEnv(t, envConfig{}, "query-commit", "CREATE PROCEDURE commit_quietly() BEGIN COMMIT; SELECT 1; END")
	var next error
	err := e.g.Do(ctx, "query-commit", func(ctx context.Context, tx *guard.Tx) error {
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		var x int
		_ = tx.QueryRowContext(ctx, "CALL commit_quietly()").Scan(&x) // a careless fn
		_, next = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2")
		return nil
	})
	if next == nil {
		t.Fatal("statement after the CALL succeeded, want it to fail: the transaction had ended")
	}
	if !errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("Do: %v, want ErrImplicitCommit", err)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 1 || n2 != 0 {
		t.Fatalf("counters %d and %d, want 1 and 0: a write ran outside the fence", n1, n2)
	}
}

// An opaque statement fn prepares keeps its check until COMMIT: statements
// fn runs between the Prepare and its execution do not take it, so a
// procedure that commits is still found.
func TestPreparedOpaqueStatementKeepsItsCheck(t *testing.T) {
	e, ctx := fencedEnv(t, envConfig{}, "prepared-call", "CREATE PROCEDURE commit_it() BEGIN COMMIT; END")
	err := e.g.Do(ctx, "prepared-call", func(ctx context.Context, tx *guard.Tx) error {
		st, err := tx.PrepareContext(ctx, "CALL commit_it()")
		if err != nil {
			return err
		}
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		_, err = st.ExecContext(ctx)
		return err
	})
	if !errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("Do: %v, want ErrImplicitCommit: the prepared CALL committed the transaction", err)
	}
}

// A procedure that rolls the transaction back and then goes on: its
// ROLLBACK ends the session (see session.go), so what it would run after
// the rollback never runs outside the fence, and nothing applies.
func TestOpaqueStatementThatRollsBackAndGoesOn(t *testing.T) {
	e, ctx := fencedEnv(t, envConfig{}, "rollback-on", "CREATE PROCEDURE rollback_then_write() BEGIN ROLLBACK; "+
		"UPDATE counters SET n = n + 100 WHERE id = 2; END")
	err := e.g.Do(ctx, "rollback-on", func(ctx context.Context, tx *guard.Tx) error {
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "CALL rollback_then_write()")
		return err
	})
	if err == nil || errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("Do: %v, want an error other than ErrImplicitCommit: nothing committed", err)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 0 || n2 != 0 {
		t.Fatalf("counters %d and %d, want 0 and 0: the procedure's write after its ROLLBACK must not run", n1, n2)
	}
}

// fencedEnv returns a test env whose key already has its fence row, with
// procedures created, and a ctx bounded for the test.
func fencedEnv(t *testing.T, cfg envConfig, key string, procedures ...string) (*env, context.Context) {
	t.Helper()
	e := newEnv(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	must(t, e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error { return nil }))
	for _, p := range procedures {
		if _, err := e.db.ExecContext(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return e, ctx
}
