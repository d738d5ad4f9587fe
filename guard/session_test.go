package guard_test

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

// A database whose default character set is utf16: the claim, sent as a
// hexadecimal literal, is read as ASCII whatever that character set is.
func TestDoOnAUTF16Database(t *testing.T) {
	admin, dsn := testenv.MySQLWithDSN(t)
	cfg, _ := mysql.ParseDSN(dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.MustExec(t, admin, "ALTER DATABASE `"+cfg.DBName+"` CHARACTER SET utf16 COLLATE utf16_general_ci")
	admin.SetMaxOpenConns(1) // the ALTER is seen by new routines anyway
	must(t, migrations.Apply(ctx, admin.DB))
	testenv.MustExec(t, admin, "CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL) CHARACTER SET utf8mb4")
	testenv.MustExec(t, admin, "INSERT INTO counters VALUES (1, 0)")
	rdb := testenv.Redis(t)
	lk := redislock.New(rdb, &redislock.Options{Prefix: testenv.Prefix(t)})
	defer lk.Close()
	g := guard.New(lk, admin, &guard.Options{MaxAttempts: 1})
	for i := 0; i < 2; i++ { // 1st: no fence row yet; 2nd: the row exists
		err := g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
			return err
		})
		if err != nil {
			t.Fatalf("Do #%d on a utf16 database: %v", i+1, err)
		}
	}
}

// A session with autocommit off (DSN autocommit=0) comes back from Do with
// autocommit off: @@autocommit reads OFF or ON on MariaDB, and the session
// is saved as 0 or 1.
func TestDoRestoresAutocommitOff(t *testing.T) {
	_, dsn := testenv.MySQLWithDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, _ := mysql.ParseDSN(dsn)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["autocommit"] = "0"
	admin := sqlx.MustOpen("mysql", dsn)
	must(t, migrations.Apply(ctx, admin.DB))
	admin.Close()
	db := sqlx.MustOpen("mysql", cfg.FormatDSN())
	defer db.Close()
	db.SetMaxOpenConns(1)
	var v string
	must(t, db.QueryRowContext(ctx, "SELECT CONCAT(@@autocommit, ',', @@completion_type)").Scan(&v))
	if v != "OFF,NO_CHAIN" && v != "0,NO_CHAIN" {
		t.Fatalf("session before Do: %s, want autocommit off", v)
	}
	rdb := testenv.Redis(t)
	lk := redislock.New(rdb, &redislock.Options{Prefix: testenv.Prefix(t)})
	defer lk.Close()
	g := guard.New(lk, db, &guard.Options{NoRelay: true})
	for i := 0; i < 2; i++ {
		must(t, g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))
	}
	var ac int
	must(t, db.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&ac))
	if ac != 0 {
		t.Fatalf("autocommit after Do = %d, want 0 (the DSN's)", ac)
	}
}

// fn reads the names of the savepoints that mark other transactions of the
// Guard in information_schema.PROCESSLIST (the same user needs no PROCESS
// privilege), where the CALLs that carry them show while they run; then it
// commits the claiming transaction, goes on outside it, and makes one of
// those savepoints. Each transaction has a name of its own, so the commit
// still finds its own gone: Do does not return nil.
func TestAMarkSeenInTheProcessListForgesNothing(t *testing.T) {
	e, ctx := fencedEnv(t, envConfig{guard: &guard.Options{MaxAttempts: 1}}, "victim")
	stopBg := make(chan struct{})
	var wg sync.WaitGroup
	var bgDos atomic.Int64
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopBg:
					return
				default:
				}
				_ = e.g.Do(ctx, "other", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
				bgDos.Add(1)
			}
		}()
	}
	re := regexp.MustCompile(`redfence_[0-9a-f]{32}`)
	var mark, seenIn string
	polls := 0
	err := e.g.Do(ctx, "victim", func(ctx context.Context, tx *guard.Tx) error {
		deadline := time.Now().Add(5 * time.Second)
		for mark == "" && time.Now().Before(deadline) {
			polls++
			rows, err := tx.Tx.QueryContext(ctx, "SELECT INFO FROM information_schema.PROCESSLIST WHERE INFO LIKE '%redfence%' AND ID <> CONNECTION_ID()")
			if err != nil {
				return err
			}
			for rows.Next() {
				var info string
				_ = rows.Scan(&info)
				if m := re.FindString(info); m != "" {
					mark, seenIn = m, info
				}
			}
			rows.Close()
		}
		close(stopBg)
		wg.Wait()
		if mark == "" {
			return nil
		}
		// Forge: commit the claiming transaction, keep running outside it,
		// make the mark again.
		if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		for _, q := range []string{"SET completion_type = 0", "COMMIT", "SAVEPOINT " + mark} {
			if _, err := tx.Tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		// The fence row is free now: another holder of "victim" could claim
		// and write here. Show it: a plain Do on the key commits meanwhile.
		done := make(chan error, 1)
		go func() {
			done <- e.g.Do(context.Background(), "victim", func(ctx context.Context, tx *guard.Tx) error {
				return increment(ctx, tx, 1)
			})
		}()
		if err := <-done; err != nil {
			t.Logf("concurrent Do: %v", err)
		} else {
			t.Logf("concurrent Do on the same key committed while fn was still running")
		}
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 1")
		return err
	})
	t.Logf("polls %d, background Dos %d, mark %q seen in %q", polls, bgDos.Load(), mark, seenIn)
	if mark == "" {
		t.Fatalf("no mark seen in the process list in %d polls, beside %d calls", polls, bgDos.Load())
	}
	if !errors.Is(err, guard.ErrImplicitCommit) {
		t.Fatalf("Do = %v, want ErrImplicitCommit: fn's statements spanned two transactions; counter 1 = %d", err, e.counter(1))
	}
}
