package fence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/migrations"
)

// exampleDB connects to the MySQL server of MYSQL_DSN (default: root with an
// empty password on 127.0.0.1:3306), creates a scratch database of the
// example's own with the fence table, and returns it with a function that
// drops it. An application opens its own schema instead, and runs
// migrations.Apply once at start-up.
func exampleDB(ctx context.Context) (*sql.DB, func(), error) {
	dsn := os.Getenv("MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/?parseTime=true"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("MYSQL_DSN: %w", err)
	}
	cfg.DBName = "" // the server, to create the scratch database on
	server, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	if err := server.PingContext(ctx); err != nil {
		_ = server.Close()
		return nil, nil, fmt.Errorf("MySQL does not answer (set MYSQL_DSN=user:pass@tcp(host:port)/): %w", err)
	}
	name := "redfence_example_" + strings.ToLower(rand.Text())
	if _, err := server.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = server.Close()
		return nil, nil, err
	}
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	drop := func() {
		if db != nil {
			_ = db.Close()
		}
		if _, err := server.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			fmt.Println("drop the scratch database:", err)
		}
		_ = server.Close()
	}
	if err == nil {
		err = migrations.Apply(ctx, db) // creates the fence table
	}
	if err != nil {
		drop()
		return nil, nil, err
	}
	return db, drop, nil
}

func ExampleClaim() {
	ctx := context.Background()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	// write runs one critical section of a lock holder: the claim first,
	// then the business statements, all in one transaction.
	write := func(token uint64, owner string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fence.Claim(ctx, tx, "inventory:42", token, owner); err != nil {
			return err
		}
		// ... read and update the inventory here ...
		return tx.Commit()
	}

	fmt.Println("holder 1, token 100:", write(100, "instance-a"))
	fmt.Println("holder 2, token 101:", write(101, "instance-b"))

	// Holder 1 was paused past its lease and comes back with its old token.
	err = write(100, "instance-a")
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Println("holder 1 again: stale, the fence holds", stale.Current)
	}
	// Output:
	// holder 1, token 100: <nil>
	// holder 2, token 101: <nil>
	// holder 1 again: stale, the fence holds 101
}

func ExampleLookup() {
	ctx := context.Background()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fence.ClaimOp(ctx, tx, "orders:7", 5, "instance-a", "op-1f3c"); err != nil {
		fmt.Println(err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println(err)
		return
	}

	// Had COMMIT failed with a lost connection, this read on a fresh
	// connection would tell whether it landed.
	f, err := fence.Lookup(ctx, db, "orders:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f.Token, f.Owner, f.OpID, f.OpID == "op-1f3c")
	// Output: 5 instance-a op-1f3c true
}

func ExampleUpdateToken() {
	ctx := context.Background()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	for _, q := range []string{
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL," +
			" fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0, fence_owner VARBINARY(191) NOT NULL DEFAULT '')",
		"INSERT INTO accounts (id, balance) VALUES (1, 100)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			fmt.Println(err)
			return
		}
	}

	debit := func(token uint64, owner string, amount int) error {
		return fence.UpdateToken(ctx, db, fence.Update{
			Table: "accounts",
			Set:   "balance = balance - ?", SetArgs: []any{amount},
			Where: "id = ?", WhereArgs: []any{1},
		}, token, owner)
	}
	fmt.Println(debit(7, "instance-a", 10))
	fmt.Println(debit(8, "instance-b", 20))
	fmt.Println(debit(7, "instance-a", 30))

	var balance int
	if err := db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&balance); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("balance:", balance)
	// Output:
	// <nil>
	// <nil>
	// fence: stale token for "accounts": presented 7 by "instance-a", fence holds 8 by "instance-b"
	// balance: 70
}

func ExampleUpdateVersion() {
	ctx := context.Background()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	for _, q := range []string{
		"CREATE TABLE articles (id INT PRIMARY KEY, body TEXT NOT NULL, version BIGINT UNSIGNED NOT NULL DEFAULT 0)",
		"INSERT INTO articles (id, body) VALUES (1, 'draft')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			fmt.Println(err)
			return
		}
	}

	save := func(body string, readVersion uint64) (uint64, error) {
		return fence.UpdateVersion(ctx, db, fence.Update{
			Table: "articles",
			Set:   "body = ?", SetArgs: []any{body},
			Where: "id = ?", WhereArgs: []any{1},
		}, readVersion)
	}
	// Two editors both read version 0; the second save loses.
	v, err := save("first edit", 0)
	fmt.Println(v, err)
	_, err = save("second edit", 0)
	fmt.Println(errors.Is(err, fence.ErrConflict), err)
	// Output:
	// 1 <nil>
	// true fence: version conflict in articles: expected 0, row has 1
}

func ExampleRetryable() {
	ctx := context.Background()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	// run retries the whole transaction when the error says it is worth it.
	run := func(fn func(*sql.Tx) error) error {
		for attempt := 1; ; attempt++ {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			err = fn(tx)
			if err == nil {
				err = tx.Commit()
			}
			if err == nil {
				return nil
			}
			_ = tx.Rollback() // explicit: after 1205 the transaction is still open
			if !fence.Retryable(err) || attempt == 3 {
				return err
			}
		}
	}
	err = run(func(tx *sql.Tx) error {
		return fence.Claim(ctx, tx, "jobs:nightly", 3, "worker-1")
	})
	fmt.Println(err)
	err = run(func(tx *sql.Tx) error {
		return fence.Claim(ctx, tx, "jobs:nightly", 2, "worker-2")
	})
	fmt.Println(errors.Is(err, fence.ErrStale), fence.Retryable(err))
	// Output:
	// <nil>
	// true false
}

// With MySQL down, every example fails with its own message naming
// MYSQL_DSN, rather than aborting the test binary.
func TestExamplesFailCleanlyWhenMySQLIsDown(t *testing.T) {
	const down = "127.0.0.1:1" // nothing listens on port 1
	cmd := exec.Command(os.Args[0], "-test.run=^Example", "-test.count=1")
	cmd.Env = append(os.Environ(), "MYSQL_DSN=root@tcp("+down+")/")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if e, ok := err.(*exec.ExitError); !ok || e.ExitCode() != 1 {
		t.Fatalf("examples with MySQL down: %v, want exit status 1\n%s", err, text)
	}
	for _, crash := range []string{"panic:", "goroutine ", "unexpected goroutines"} {
		if strings.Contains(text, crash) {
			t.Fatalf("examples with MySQL down crashed or leaked (%q)\n%s", crash, text)
		}
	}
	const examples = 5
	if n := strings.Count(text, "--- FAIL: Example"); n != examples {
		t.Errorf("%d examples failed, want %d\n%s", n, examples, text)
	}
	if n := strings.Count(text, "got:\nMySQL does not answer (set MYSQL_DSN="); n != examples {
		t.Errorf("%d examples said MySQL does not answer, want %d\n%s", n, examples, text)
	}
}
