package guard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

var errSoldOut = errors.New("sold out")

// Ten buyers race for the last three apples. Each purchase runs under the
// apple's lock, in a transaction the database fences with the lock's token:
// exactly three sales go through.
func ExampleGuard_Do() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, err := exampleRedis(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rdb.Close()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	// Once per application: the fence table, a Locker and a Guard.
	if err := migrations.Apply(ctx, db.DB); err != nil {
		fmt.Println(err)
		return
	}
	locker := redislock.New(rdb, &redislock.Options{Prefix: "example-" + rand.Text(), TokenTTL: time.Minute})
	defer locker.Close()
	g := guard.New(locker, db, nil)

	// A critical section: sell one item if any is left. fn may run more
	// than once (after a deadlock, for instance): keep it to the database.
	sell := func(ctx context.Context, sku string) error {
		return g.Do(ctx, "stock:"+sku, func(ctx context.Context, tx *guard.Tx) error {
			var left int
			if err := tx.GetContext(ctx, &left, "SELECT qty FROM stock WHERE sku = ?", sku); err != nil {
				return err
			}
			if left == 0 {
				return errSoldOut
			}
			_, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty - 1 WHERE sku = ?", sku)
			return err
		})
	}

	var wg sync.WaitGroup
	var sold, refused atomic.Int32
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := sell(ctx, "apple"); {
			case err == nil:
				sold.Add(1)
			case errors.Is(err, errSoldOut):
				refused.Add(1)
			default:
				fmt.Println("error:", err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("sold:", sold.Load(), "refused:", refused.Load())
	// Output: sold: 3 refused: 7
}

// DoRead names the read a critical section begins with: it goes to the
// database with the fence claim, in one request, and fn starts with its
// result. On a hot key this saves a round trip on every call.
func ExampleGuard_DoRead() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, err := exampleRedis(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rdb.Close()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if err := migrations.Apply(ctx, db.DB); err != nil {
		fmt.Println(err)
		return
	}
	locker := redislock.New(rdb, &redislock.Options{Prefix: "example-" + rand.Text(), TokenTTL: time.Minute})
	defer locker.Close()
	g := guard.New(locker, db, nil)

	sell := func(ctx context.Context, sku string) error {
		var left int
		read := guard.ReadOne(&left, "SELECT qty FROM stock WHERE sku = ?", sku)
		return g.DoRead(ctx, "stock:"+sku, read, func(ctx context.Context, tx *guard.Tx) error {
			if left == 0 {
				return errSoldOut
			}
			_, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty - 1 WHERE sku = ?", sku)
			return err
		})
	}

	var sold, refused int
	for range 5 {
		switch err := sell(ctx, "apple"); {
		case err == nil:
			sold++
		case errors.Is(err, errSoldOut):
			refused++
		default:
			fmt.Println("error:", err)
		}
	}
	var missing int
	err = g.DoRead(ctx, "stock:pear", guard.ReadOne(&missing, "SELECT qty FROM stock WHERE sku = ?", "pear"),
		func(context.Context, *guard.Tx) error { return nil })
	fmt.Println("sold:", sold, "refused:", refused, "no pear row:", errors.Is(err, sql.ErrNoRows))
	// Output: sold: 3 refused: 2 no pear row: true
}

// Hooks plug metrics into a Guard. Here they feed plain counters; a metrics
// library's counters and histograms take their place in an application
// (extra/redfenceotel does it for OpenTelemetry).
func ExampleHooks() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, err := exampleRedis(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rdb.Close()
	db, drop, err := exampleDB(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if err := migrations.Apply(ctx, db.DB); err != nil {
		fmt.Println(err)
		return
	}
	locker := redislock.New(rdb, &redislock.Options{Prefix: "example-" + rand.Text(), TokenTTL: time.Minute})
	defer locker.Close()

	// Hooks may run on several goroutines at once: count atomically.
	var acquired, retried, fenced, committed atomic.Int64
	var mu sync.Mutex
	outcomes := map[guard.Outcome]int{}
	g := guard.New(locker, db, &guard.Options{Hooks: guard.Hooks{
		OnAcquired:  func(key string, token uint64, wait time.Duration) { acquired.Add(1) },
		OnRetry:     func(key string, attempt int, err error) { retried.Add(1) },
		OnFenced:    func(key string, token, current uint64) { fenced.Add(1) },
		OnCommitted: func(key string, token uint64, elapsed time.Duration) { committed.Add(1) },
		OnDone: func(ctx context.Context, r guard.Result) {
			mu.Lock()
			defer mu.Unlock()
			outcomes[r.Outcome]++
		},
	}})

	// Four sales of three apples: the last one finds the stock empty.
	for range 4 {
		err := g.Do(ctx, "stock:apple", func(ctx context.Context, tx *guard.Tx) error {
			res, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty - 1 WHERE sku = ? AND qty > 0", "apple")
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return errors.Join(errSoldOut, err)
			}
			return nil
		})
		if err != nil && !errors.Is(err, errSoldOut) {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("acquired:", acquired.Load(), "retried:", retried.Load(),
		"fenced:", fenced.Load(), "committed:", committed.Load())
	mu.Lock()
	fmt.Println("outcomes:", outcomes)
	mu.Unlock()
	// Output:
	// acquired: 4 retried: 0 fenced: 0 committed: 3
	// outcomes: map[committed:3 failed:1]
}

// exampleRedis connects to REDIS_ADDR, or to a local Redis on
// 127.0.0.1:6379, and checks that it answers.
func exampleRedis(ctx context.Context) (*redis.Client, error) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("Redis does not answer (set REDIS_ADDR=host:port): %w", err)
	}
	return rdb, nil
}

// exampleDB connects to the MySQL server of MYSQL_DSN (default: root with an
// empty password on 127.0.0.1:3306), creates a scratch database of the
// example's own with a stock table holding three apples, and returns it with
// a function that drops it. An application opens its own schema instead.
//
// guard works on *sqlx.DB; an application that already has a *sql.DB wraps
// it with sqlx.NewDb(db, "mysql"), which shares the pool.
func exampleDB(ctx context.Context) (*sqlx.DB, func(), error) {
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
	pool, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		_ = server.Close()
		return nil, nil, err
	}
	db := sqlx.NewDb(pool, "mysql")
	drop := func() {
		_ = db.Close()
		if _, err := server.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			fmt.Println("drop the scratch database:", err)
		}
		_ = server.Close()
	}
	for _, q := range []string{
		"CREATE TABLE stock (sku VARCHAR(32) PRIMARY KEY, qty INT NOT NULL)",
		"INSERT INTO stock VALUES ('apple', 3)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			drop()
			return nil, nil, err
		}
	}
	return db, drop, nil
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
	const examples = 3
	if n := strings.Count(text, "--- FAIL: Example"); n != examples {
		t.Errorf("%d examples failed, want %d\n%s", n, examples, text)
	}
	if n := strings.Count(text, "got:\nMySQL does not answer (set MYSQL_DSN="); n != examples {
		t.Errorf("%d examples said MySQL does not answer, want %d\n%s", n, examples, text)
	}
}
