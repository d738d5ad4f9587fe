package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/guard"
)

// A write conflict under MariaDB's snapshot isolation (1020, "Record has
// changed since last read") rolls the whole transaction back, claim
// included. fn going on from it must not run its next statements outside
// the fence: they are refused, and Do runs the transaction again.
func TestSnapshotConflictEndsTheAttempt(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var conflict, refused error
	attempts := 0
	err := e.g.Do(ctx, "snap", func(ctx context.Context, tx *guard.Tx) error {
		attempts = tx.Attempt()
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_snapshot_isolation = ON"); err != nil {
			t.Fatalf("this test needs MariaDB 10.6.18, 10.11.8, 11.x or later (innodb_snapshot_isolation): %v", err)
		}
		var n int
		if err := tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = 1"); err != nil {
			return err
		}
		if tx.Attempt() == 1 {
			// A writer outside the fence changes the row meanwhile.
			if _, err := e.db.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 1"); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = 1", n+1)
		if tx.Attempt() == 1 {
			conflict = err // fn treats that update as best effort and goes on
		} else if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2")
		if tx.Attempt() == 1 {
			refused = err
		}
		return err
	})
	var me *mysql.MySQLError
	if !errors.As(conflict, &me) || me.Number != 1020 {
		t.Fatalf("the conflicting write returned %v, want error 1020", conflict)
	}
	if refused == nil {
		t.Fatal("the statement after the conflict ran: the transaction had been rolled back")
	}
	if err != nil || attempts != 2 {
		t.Fatalf("Do: %v after %d attempts, want nil after 2", err, attempts)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 11 || n2 != 1000 {
		t.Fatalf("counters %d and %d, want 11 and 1000: a write ran outside the fence or twice", n1, n2)
	}
}

// After a server error Tx does not know, fn may go on: Tx first checks that
// the transaction is still open (its claim still holds the fence row). When
// it is, fn's statements run and Do commits; when the server had rolled it
// back, the next statement is refused and Do fails with ErrNotCommitted,
// with nothing applied.
func TestUnknownServerErrorChecksTheTransaction(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	signal := "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'from fn', MYSQL_ERRNO = 1644"

	// Still open: fn goes on and commits.
	err := e.g.Do(ctx, "unknown", func(ctx context.Context, tx *guard.Tx) error {
		if _, err := tx.ExecContext(ctx, signal); err == nil {
			t.Error("SIGNAL returned no error")
		}
		return increment(ctx, tx, 1)
	})
	if err != nil || e.counter(1) != 1 {
		t.Fatalf("Do after a statement-only error: %v, counter %d; want nil and 1", err, e.counter(1))
	}

	// Rolled back by the server: here a ROLLBACK sent past Tx stands for
	// a server that rolled back and reported an error Tx does not know.
	// (A ROLLBACK from fn would end the session, see session.go; with
	// completion_type set back first, it leaves the session open, as a
	// rollback by the server does.)
	var next error
	err = e.g.Do(ctx, "unknown", func(ctx context.Context, tx *guard.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 2"); err != nil {
			return err
		}
		if _, err := tx.Tx.ExecContext(ctx, "SET completion_type = 'NO_CHAIN'"); err != nil {
			return err
		}
		if _, err := tx.Tx.ExecContext(ctx, "ROLLBACK"); err != nil {
			return err
		}
		_, _ = tx.ExecContext(ctx, signal)
		_, next = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 1")
		return nil // fn ignores both errors
	})
	if next == nil || !errors.Is(next, guard.ErrNotCommitted) {
		t.Fatalf("statement after the rollback: %v, want it refused with ErrNotCommitted", next)
	}
	if !errors.Is(err, guard.ErrNotCommitted) {
		t.Fatalf("Do: %v, want ErrNotCommitted", err)
	}
	if n1, n2 := e.counter(1), e.counter(2); n1 != 1 || n2 != 0 {
		t.Fatalf("counters %d and %d, want 1 and 0: something ran outside the fence", n1, n2)
	}
}

// A connection lost after an unknown server error, found by the check of
// the transaction, is a lost connection like any other: Do runs the
// transaction again.
func TestLostConnectionAfterUnknownErrorIsRetried(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{NoRelay: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must(t, e.g.Do(ctx, "lost", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row
	attempts := 0
	err := e.g.Do(ctx, "lost", func(ctx context.Context, tx *guard.Tx) error {
		attempts = tx.Attempt()
		if tx.Attempt() == 1 {
			var id int64
			if err := tx.GetContext(ctx, &id, "SELECT CONNECTION_ID()"); err != nil {
				return err
			}
			_, _ = tx.ExecContext(ctx, "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'from fn', MYSQL_ERRNO = 1644")
			if _, err := e.db.ExecContext(ctx, "KILL ?", id); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the killed connection gone", func() bool {
				var n int
				return e.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id) == nil && n == 0
			})
		}
		return increment(ctx, tx, 1)
	})
	if err != nil || attempts != 2 {
		t.Fatalf("Do: %v after %d attempts, want nil after 2 (a lost connection is retried)", err, attempts)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter %d, want 1", n)
	}
}
