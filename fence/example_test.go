package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
)

// exampleDB opens a database of its own on the test server (MYSQL_DSN) with
// the fence table created; the returned function drops it. In an
// application, db is your pool and migrations.Apply runs at start-up.
func exampleDB() (*sql.DB, func()) {
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN())
	if err != nil {
		log.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	name := "rfexample_" + testenv.RandomHex(6)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		log.Fatal(err)
	}
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	if err := migrations.Apply(context.Background(), db); err != nil {
		log.Fatal(err)
	}
	return db, func() {
		_ = db.Close()
		_, _ = admin.Exec("DROP DATABASE " + name)
		_ = admin.Close()
	}
}

func ExampleClaim() {
	db, drop := exampleDB()
	defer drop()
	ctx := context.Background()

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
	err := write(100, "instance-a")
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
	db, drop := exampleDB()
	defer drop()
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := fence.ClaimOp(ctx, tx, "orders:7", 5, "instance-a", "op-1f3c"); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// Had COMMIT failed with a lost connection, this read on a fresh
	// connection would tell whether it landed.
	f, err := fence.Lookup(ctx, db, "orders:7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.Token, f.Owner, f.OpID, f.OpID == "op-1f3c")
	// Output: 5 instance-a op-1f3c true
}

func ExampleUpdateToken() {
	db, drop := exampleDB()
	defer drop()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL," +
			" fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0, fence_owner VARBINARY(191) NOT NULL DEFAULT '')",
		"INSERT INTO accounts (id, balance) VALUES (1, 100)",
	} {
		if _, err := db.Exec(q); err != nil {
			log.Fatal(err)
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
	if err := db.QueryRow("SELECT balance FROM accounts WHERE id = 1").Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// <nil>
	// <nil>
	// fence: stale token for "accounts": presented 7 by "instance-a", fence holds 8 by "instance-b"
	// balance: 70
}

func ExampleUpdateVersion() {
	db, drop := exampleDB()
	defer drop()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE articles (id INT PRIMARY KEY, body TEXT NOT NULL, version BIGINT UNSIGNED NOT NULL DEFAULT 0)",
		"INSERT INTO articles (id, body) VALUES (1, 'draft')",
	} {
		if _, err := db.Exec(q); err != nil {
			log.Fatal(err)
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
	db, drop := exampleDB()
	defer drop()
	ctx := context.Background()

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
	err := run(func(tx *sql.Tx) error {
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
