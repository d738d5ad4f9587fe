package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// A Tx made outside Do, as a test of an fn may make one around its own
// transaction, works: its statements run, and its errors are recorded as
// in Do's.
func TestTxMadeOutsideDo(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stx, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer func() { _ = stx.Rollback() }()
	tx := &guard.Tx{Tx: stx}
	must(t, increment(ctx, tx, 1))
	var n int
	must(t, tx.QueryRowxContext(ctx, "SELECT n FROM counters WHERE id = 1").Scan(&n))
	if n != 1 {
		t.Fatalf("n = %d, want 1", n)
	}
	if _, err := tx.ExecContext(ctx, "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'deadlock'"); err == nil {
		t.Fatal("SIGNAL returned no error")
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Fatal("a statement after a deadlock ran, want it refused")
	}
}
