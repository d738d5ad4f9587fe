package guard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// running counts statements of the test's database, on other connections,
// that are still executing and whose text starts with prefix. For a
// statement that normally takes a millisecond, being seen still running
// means it waits for a row lock. (PROCESSLIST is live; INNODB_TRX is a cache
// that InnoDB refreshes only when nobody read it for 100ms.)
func (e *env) running(prefix string) int {
	var n int
	if err := e.db.Get(&n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST"+
		" WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND IN ('Query', 'Execute') AND INFO LIKE ?",
		prefix+"%"); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// heavyTx begins a plain transaction that holds counter row 2 and updates
// many filler rows, so that it weighs more than fn's transaction and InnoDB
// picks fn's as the victim of a deadlock between them. It is rolled back
// when the test ends unless committed first.
func heavyTx(t *testing.T, e *env) *sqlx.Tx {
	t.Helper()
	testenv.MustExec(t, e.db, "CREATE TABLE filler (id INT PRIMARY KEY, v INT NOT NULL)")
	testenv.MustExec(t, e.db, "INSERT INTO filler (id, v) WITH RECURSIVE s(i) AS"+
		" (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 200) SELECT i, 0 FROM s")
	ctx := context.Background()
	ptx, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	t.Cleanup(func() { _ = ptx.Rollback() })
	_, err = ptx.ExecContext(ctx, "UPDATE filler SET v = v + 1")
	must(t, err)
	_, err = ptx.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 2")
	must(t, err)
	return ptx
}

// A real deadlock (1213) between fn and a plain transaction: InnoDB rolls
// back fn's transaction (the lighter one), Do retries it under the same lock
// and token, and the second attempt succeeds (with the lock held until the
// transaction ends; see TestHandOffRetryTakesNewTurn for the default).
func TestRetryOnDeadlock(t *testing.T) {
	var retries []error
	e := newEnv(t, envConfig{guard: atEnd(guard.Options{Hooks: guard.Hooks{
		OnRetry: func(key string, attempt int, err error) { retries = append(retries, err) },
	}})})
	ctx := context.Background()
	ptx := heavyTx(t, e)

	plainDone := make(chan error, 1)
	var tokens []uint64
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		tokens = append(tokens, tx.Token())
		if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		if tx.Attempt() == 1 {
			go func() {
				_, err := ptx.ExecContext(context.Background(), "UPDATE counters SET n = n + 10 WHERE id = 1")
				if err == nil {
					err = ptx.Commit()
				}
				plainDone <- err
			}()
			waitFor(t, "the plain transaction to wait for fn's row", func() bool {
				return e.running("UPDATE counters SET n = n + 10 WHERE id = 1") == 1
			})
		}
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 2")
		return err
	})
	must(t, err)
	must(t, <-plainDone)
	if len(tokens) != 2 || tokens[0] != tokens[1] {
		t.Fatalf("fn ran with tokens %v, want twice with the same token", tokens)
	}
	if len(retries) != 1 || mysqlErrno(retries[0]) != 1213 || !fence.Retryable(retries[0]) {
		t.Fatalf("retries = %v, want one deadlock", retries)
	}
	if a, b := e.counter(1), e.counter(2); a != 11 || b != 11 {
		t.Fatalf("counters = %d, %d; want 11, 11", a, b)
	}
}

// A real lock wait timeout (1205): the statement fails but the transaction
// would keep its locks; Do rolls it back explicitly and retries.
func TestRetryOnLockWaitTimeout(t *testing.T) {
	ctx := context.Background()
	var ptxCommitted atomic.Bool
	var e *env
	var commitPlain func()
	e = newEnv(t, envConfig{guard: &guard.Options{Hooks: guard.Hooks{
		OnRetry: func(key string, attempt int, err error) {
			if mysqlErrno(err) != 1205 {
				t.Errorf("retry after %v, want 1205", err)
			}
			commitPlain()
		},
	}}})
	ptx, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer func() { _ = ptx.Rollback() }()
	_, err = ptx.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 2")
	must(t, err)
	commitPlain = func() { must(t, ptx.Commit()); ptxCommitted.Store(true) }

	attempts := 0
	err = e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 2")
		return err
	})
	must(t, err)
	if attempts != 2 || !ptxCommitted.Load() {
		t.Fatalf("attempts = %d, want 2", attempts)
	}
	if n := e.counter(2); n != 11 {
		t.Fatalf("counter = %d, want 11", n)
	}
}

// The connection dies under fn (KILL from another session) before COMMIT:
// the server rolls the transaction back, Do retries on a fresh connection.
func TestRetryOnConnectionLostBeforeCommit(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	attempts := 0
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		attempts++
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		if tx.Attempt() == 1 {
			var id int64
			if err := tx.GetContext(ctx, &id, "SELECT CONNECTION_ID()"); err != nil {
				return err
			}
			testenv.MustExec(t, e.db, fmt.Sprintf("KILL %d", id))
			return increment(ctx, tx, 1) // fails: the connection is gone
		}
		return nil
	})
	must(t, err)
	if attempts != 2 {
		t.Fatalf("attempts = %d, want 2", attempts)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1: the killed attempt must leave nothing", n)
	}
}

// killOwnConnection kills the connection tx runs on, from another
// connection, and returns the error of tx's next statement.
func killOwnConnection(ctx context.Context, t *testing.T, e *env, tx *guard.Tx) error {
	t.Helper()
	var id int64
	if err := tx.GetContext(ctx, &id, "SELECT CONNECTION_ID()"); err != nil {
		return err
	}
	testenv.MustExec(t, e.db, fmt.Sprintf("KILL %d", id))
	return increment(ctx, tx, 1)
}

func TestRetriesAreBounded(t *testing.T) {
	retries := 0
	e := newEnv(t, envConfig{guard: &guard.Options{MaxAttempts: 3, BackoffMin: time.Millisecond,
		Hooks: guard.Hooks{OnRetry: func(string, int, error) { retries++ }}}})
	ctx := context.Background()
	calls := 0
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		calls++
		return killOwnConnection(ctx, t, e, tx)
	})
	if !fence.IsConnectionLost(err) || calls != 3 || retries != 2 {
		t.Fatalf("Do = %v after %d calls, %d retries; want the lost connection after 3 calls, 2 retries", err, calls, retries)
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter = %d, want 0: no killed attempt may leave anything", n)
	}

	// A non-retryable error is returned at once.
	calls = 0
	dup := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	err = e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { calls++; return dup })
	if !errors.Is(err, dup) || calls != 1 {
		t.Fatalf("Do = %v after %d calls, want the duplicate-key error after 1", err, calls)
	}
	e.assertFree("k")
}

func TestRetryBackoffStopsAtDeadline(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxAttempts: 5, BackoffMin: time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	calls := 0
	start := time.Now()
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		calls++
		return killOwnConnection(ctx, t, e, tx)
	})
	if !errors.Is(err, context.DeadlineExceeded) || !fence.IsConnectionLost(err) || calls != 1 {
		t.Fatalf("Do = %v after %d calls", err, calls)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Do took %v with a 2s deadline", d)
	}
	e.assertFree("k")
}

// Errors of fn's own making are never retried, whatever their class: an
// io.ErrUnexpectedEOF from parsing an upstream reply, a net.Error from an
// HTTP call, a MySQL deadlock error that did not come from this
// transaction's statements. Retrying would run fn's work again although
// nothing told Do the transaction was lost.
func TestErrorsNotOfTheTransactionAreNotRetried(t *testing.T) {
	retries := 0
	e := newEnv(t, envConfig{guard: &guard.Options{MaxAttempts: 3, BackoffMin: time.Millisecond,
		Hooks: guard.Hooks{OnRetry: func(string, int, error) { retries++ }}}})
	ctx := context.Background()
	for _, fnErr := range []error{
		fmt.Errorf("parse upstream: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("read body: %w", io.EOF),
		fmt.Errorf("call inventory service: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}),
		fmt.Errorf("other database: %w", &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}),
		fmt.Errorf("other database: %w", mysql.ErrInvalidConn),
	} {
		calls := 0
		err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			calls++
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			return fnErr
		})
		if !errors.Is(err, fnErr) || calls != 1 {
			t.Errorf("fn returning %v: Do = %v after %d calls, want that error after 1 call", fnErr, err, calls)
		}
	}
	if retries != 0 || e.counter(1) != 0 {
		t.Fatalf("%d retries, counter %d; want 0 and 0", retries, e.counter(1))
	}
	e.assertFree("k")
}
