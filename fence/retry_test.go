package fence_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
)

func TestRetryableClassification(t *testing.T) {
	my := func(n uint16) error { return &mysql.MySQLError{Number: n, Message: "x"} }
	cases := []struct {
		name            string
		err             error
		retryable, lost bool
	}{
		{"nil", nil, false, false},
		{"deadlock", my(1213), true, false},
		{"wrapped deadlock", fmt.Errorf("fence: claim: %w", my(1213)), true, false},
		{"lock wait timeout", my(1205), true, false},
		{"write conflict under snapshot isolation", my(1020), true, false},
		{"duplicate key", my(1062), false, false},
		{"syntax", my(1064), false, false},
		{"query interrupted", my(1317), false, false},
		{"connection killed", my(1927), true, true},
		{"server shutdown", my(1053), true, true},
		{"driver.ErrBadConn", driver.ErrBadConn, true, true},
		{"mysql.ErrInvalidConn", fmt.Errorf("commit: %w", mysql.ErrInvalidConn), true, true},
		// Errors an application's own code returns (a body cut short, a
		// parser at the end of its input, a failed HTTP call) are not the
		// database connection's, whatever their class.
		{"application EOF", fmt.Errorf("parse upstream: %w", io.EOF), false, false},
		{"application unexpected EOF", fmt.Errorf("parse upstream: %w", io.ErrUnexpectedEOF), false, false},
		{"application reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false, false},
		{"application broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, false, false},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false, false},
		{"stale", &fence.StaleError{Resource: "r", Token: 1, Current: 2}, false, false},
		{"conflict", fmt.Errorf("x: %w", fence.ErrConflict), false, false},
		{"bad input", fence.ErrInvalidToken, false, false},
		{"unexpected answer", fence.ErrUnexpected, false, false},
		{"canceled", context.Canceled, false, false},
		{"deadline", context.DeadlineExceeded, false, false},
		{"deadlock after the caller gave up", errors.Join(my(1213), context.Canceled), false, false},
		{"no rows", sql.ErrNoRows, false, false},
		{"tx done", sql.ErrTxDone, false, false},
	}
	for _, c := range cases {
		if got := fence.Retryable(c.err); got != c.retryable {
			t.Errorf("Retryable(%s) = %v, want %v", c.name, got, c.retryable)
		}
		if got := fence.IsConnectionLost(c.err); got != c.lost {
			t.Errorf("IsConnectionLost(%s) = %v, want %v", c.name, got, c.lost)
		}
	}
}

// TestRetryableOnServerErrors provokes each error on the server and checks
// its classification.
func TestRetryableOnServerErrors(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	testenv.MustExec(t, db, "CREATE TABLE kv (id INT PRIMARY KEY, v INT NOT NULL)")
	testenv.MustExec(t, db, "INSERT INTO kv VALUES (1, 0), (2, 0)")

	t.Run("deadlock 1213", func(t *testing.T) {
		tx1, id1, close1, err := connTx(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer close1()
		tx2 := begin(t, db, nil)
		mustExecTx(t, tx1, "UPDATE kv SET v = v + 1 WHERE id = 1")
		mustExecTx(t, tx2, "UPDATE kv SET v = v + 1 WHERE id = 2")
		first := make(chan error, 1)
		go func() {
			_, err := tx1.ExecContext(ctx, "UPDATE kv SET v = v + 1 WHERE id = 2")
			first <- err
		}()
		stop := make(chan struct{})
		waitLockWait(t, db, id1, stop)
		_, err2 := tx2.ExecContext(ctx, "UPDATE kv SET v = v + 1 WHERE id = 1")
		err1 := <-first
		err = err1
		if err == nil {
			err = err2
		}
		if mysqlErrNumber(err) != 1213 {
			t.Fatalf("expected a deadlock, got %v / %v", err1, err2)
		}
		if !fence.Retryable(err) || fence.IsConnectionLost(err) {
			t.Fatalf("deadlock: Retryable=%v IsConnectionLost=%v", fence.Retryable(err), fence.IsConnectionLost(err))
		}
	})

	t.Run("lock wait timeout 1205 keeps the transaction", func(t *testing.T) {
		holder := begin(t, db, nil)
		mustExecTx(t, holder, "UPDATE kv SET v = 100 WHERE id = 1")
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		mustExecTx(t, tx, "UPDATE kv SET v = 200 WHERE id = 2")
		_, err = tx.ExecContext(ctx, "UPDATE kv SET v = 200 WHERE id = 1")
		if mysqlErrNumber(err) != 1205 {
			t.Fatalf("expected a lock wait timeout, got %v", err)
		}
		if !fence.Retryable(err) || fence.IsConnectionLost(err) {
			t.Fatalf("1205: Retryable=%v IsConnectionLost=%v", fence.Retryable(err), fence.IsConnectionLost(err))
		}
		// Only the statement was rolled back: the earlier write (and its
		// lock) is still there, which is why the caller must roll back.
		var v int
		if err := tx.QueryRowContext(ctx, "SELECT v FROM kv WHERE id = 2").Scan(&v); err != nil || v != 200 {
			t.Fatalf("after 1205 the transaction's earlier write reads %d (%v), want 200", v, err)
		}
	})

	t.Run("connection killed", func(t *testing.T) {
		tx, id, closeTx, err := connTx(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer closeTx()
		if err := fence.Claim(ctx, tx, "killed", 1, "o"); err != nil {
			t.Fatal(err)
		}
		testenv.MustExec(t, db, fmt.Sprintf("KILL %d", id))
		_, err = tx.ExecContext(ctx, "UPDATE kv SET v = v + 1 WHERE id = 1")
		if err == nil {
			t.Fatal("statement on a killed connection succeeded")
		}
		if !fence.IsConnectionLost(err) || !fence.Retryable(err) {
			t.Fatalf("%v (%T): IsConnectionLost=%v Retryable=%v", err, err, fence.IsConnectionLost(err), fence.Retryable(err))
		}
		if _, lerr := fence.Lookup(ctx, db, "killed"); !errors.Is(lerr, fence.ErrNoFence) {
			t.Fatalf("the killed transaction's claim survived: %v", lerr)
		}
	})

	t.Run("connection killed while waiting", func(t *testing.T) {
		holder := begin(t, db, nil)
		if err := fence.Claim(ctx, holder, "busy", 5, "h"); err != nil {
			t.Fatal(err)
		}
		tx, id, closeTx, err := connTx(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer closeTx()
		claimed := make(chan error, 1)
		go func() { claimed <- fence.Claim(ctx, tx, "busy", 6, "w") }()
		waitLockWait(t, db, id, nil)
		testenv.MustExec(t, db, fmt.Sprintf("KILL %d", id))
		err = <-claimed
		if err == nil || !fence.IsConnectionLost(err) || !fence.Retryable(err) {
			t.Fatalf("%v: IsConnectionLost=%v Retryable=%v", err, fence.IsConnectionLost(err), fence.Retryable(err))
		}
	})

	t.Run("not retryable", func(t *testing.T) {
		_, dup := db.ExecContext(ctx, "INSERT INTO kv VALUES (1, 0)")
		_, syntax := db.ExecContext(ctx, "UPDATE kv SET WHERE")
		if mysqlErrNumber(dup) != 1062 || mysqlErrNumber(syntax) != 1064 {
			t.Fatalf("provoking errors: %v / %v", dup, syntax)
		}
		if err := claimCommitted(t, db, "s", 9, "a"); err != nil {
			t.Fatal(err)
		}
		stale := claimCommitted(t, db, "s", 8, "a")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, canceled := db.ExecContext(cctx, "UPDATE kv SET v = 0")
		for name, err := range map[string]error{"duplicate": dup, "syntax": syntax, "stale": stale, "canceled": canceled} {
			if err == nil || fence.Retryable(err) || fence.IsConnectionLost(err) {
				t.Errorf("%s (%v): Retryable=%v IsConnectionLost=%v", name, err, fence.Retryable(err), fence.IsConnectionLost(err))
			}
		}
	})
}

func mustExecTx(t testing.TB, tx *sql.Tx, query string, args ...any) {
	t.Helper()
	if _, err := tx.ExecContext(ctxT(t), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
