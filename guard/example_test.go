package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

var errSoldOut = errors.New("sold out")

// Ten buyers on ten application instances race for the last three apples.
// Each purchase runs under the apple's lock, in a transaction the database
// fences with the lock's token: exactly three sales go through.
func ExampleGuard_Do() {
	ctx := context.Background()
	rdb, db, prefix, cleanup := exampleServers()
	defer cleanup()

	// Once per application: the fence table, a Locker and a Guard.
	if err := migrations.Apply(ctx, db.DB); err != nil {
		log.Fatal(err)
	}
	locker := redislock.New(rdb, &redislock.Options{Prefix: prefix})
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

// exampleServers connects to the local Redis and MySQL (REDIS_ADDR and
// MYSQL_DSN override them), creates a scratch database with a stock table and
// returns a Redis key prefix of the example's own, plus the clean-up.
func exampleServers() (*redis.Client, *sqlx.DB, string, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN())
	if err != nil {
		log.Fatal(err)
	}
	admin, err := sqlx.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	name := "rfexample_" + testenv.RandomHex(6)
	admin.MustExec("CREATE DATABASE " + name)
	cfg.DBName = name
	db := sqlx.MustOpen("mysql", cfg.FormatDSN())
	db.MustExec("CREATE TABLE stock (sku VARCHAR(32) PRIMARY KEY, qty INT NOT NULL)")
	db.MustExec("INSERT INTO stock VALUES ('apple', 3)")
	prefix := "rfexample:" + testenv.RandomHex(4)
	return rdb, db, prefix, func() {
		_ = db.Close()
		admin.MustExec("DROP DATABASE " + name)
		_ = admin.Close()
		ctx := context.Background()
		if keys, err := rdb.Keys(ctx, prefix+"*").Result(); err == nil && len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
		_ = rdb.Close()
	}
}
