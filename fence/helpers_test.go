package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
)

// openWith opens another pool on the database behind dsn with DSN options
// changed by edit, closed when the test ends.
func openWith(t testing.TB, dsn string, edit func(*mysql.Config)) *sqlx.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	db, err := sqlx.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newDBWithDSN is newDB that also returns the DSN of the private database.
func newDBWithDSN(t testing.TB) (*sqlx.DB, string) {
	t.Helper()
	db, dsn := testenv.MySQLWithDSN(t)
	if err := applyMigrations(db); err != nil {
		t.Fatalf("migrations.Apply: %v", err)
	}
	return db, dsn
}

func begin(t testing.TB, db *sqlx.DB, opts *sql.TxOptions) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

func commit(t testing.TB, tx *sql.Tx) {
	t.Helper()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// claimCommitted claims in a transaction of its own and commits it.
func claimCommitted(t testing.TB, db *sqlx.DB, resource string, token uint64, owner string) error {
	t.Helper()
	tx := begin(t, db, nil)
	err := fence.Claim(ctxT(t), tx, resource, token, owner)
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	commit(t, tx)
	return nil
}

func lookup(t testing.TB, q fence.Querier, resource string) fence.Fence {
	t.Helper()
	f, err := fence.Lookup(ctxT(t), q, resource)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", resource, err)
	}
	return f
}

func countFences(t testing.TB, db *sqlx.DB) int {
	t.Helper()
	var n int
	if err := db.GetContext(ctxT(t), &n, "SELECT COUNT(*) FROM "+fence.Table); err != nil {
		t.Fatal(err)
	}
	return n
}

func mysqlErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// connTx opens a transaction on a connection of its own and returns it with
// the connection's server thread id, so a test can watch it in
// information_schema.INNODB_TRX. Asking for the id is not a statement of the
// transaction.
func connTx(ctx context.Context, db *sqlx.DB, opts *sql.TxOptions) (*sql.Tx, int64, func(), error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		_ = conn.Close()
		return nil, 0, nil, err
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		_ = conn.Close()
		return nil, 0, nil, err
	}
	return tx, id, func() { _ = tx.Rollback(); _ = conn.Close() }, nil
}

// waitLockWait waits until the transaction of server thread id is waiting
// for a row lock, as InnoDB reports it, so a test knows a claim is blocked
// rather than slow. It gives up when stop is closed or after 10 s.
func waitLockWait(t testing.TB, db *sqlx.DB, id int64, stop <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		err := db.GetContext(context.Background(), &waiting,
			"SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id = ?", id)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		select {
		case <-stop:
			t.Fatalf("thread %d finished instead of waiting for a lock", id)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d not waiting for a lock after 10s", id)
		}
		// InnoDB refreshes the INNODB_TRX cache only when it has not been
		// read for 100 ms: polling faster would read a frozen picture.
		time.Sleep(150 * time.Millisecond)
	}
}
