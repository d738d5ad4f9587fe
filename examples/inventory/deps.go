package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/examples/inventory/store"
)

// Defaults shared with the test suite (internal/testenv) and docker-compose.yml.
const (
	defaultRedisAddr = "127.0.0.1:6379"
	defaultMySQLDSN  = "root@tcp(127.0.0.1:3306)/"
	defaultDatabase  = "redfence_inventory"
)

// servers names where Redis and MySQL are.
type servers struct {
	redisAddr string
	mysqlDSN  string // with the example's database selected
	database  string
}

// serversFromEnv reads REDIS_ADDR and MYSQL_DSN. A DSN that selects no
// database gets database (created on first use).
func serversFromEnv(database string) (servers, error) {
	s := servers{redisAddr: os.Getenv("REDIS_ADDR"), mysqlDSN: os.Getenv("MYSQL_DSN")}
	if s.redisAddr == "" {
		s.redisAddr = defaultRedisAddr
	}
	if s.mysqlDSN == "" {
		s.mysqlDSN = defaultMySQLDSN
	}
	cfg, err := mysql.ParseDSN(s.mysqlDSN)
	if err != nil {
		return s, &unreachableError{which: "MySQL", addr: s.mysqlDSN, err: fmt.Errorf("MYSQL_DSN is not a valid DSN: %w", err)}
	}
	if cfg.DBName == "" {
		cfg.DBName = database
	}
	s.database = cfg.DBName
	s.mysqlDSN = cfg.FormatDSN()
	return s, nil
}

// unreachableError says which server could not be reached and how to fix it.
type unreachableError struct {
	which string // "Redis" or "MySQL"
	addr  string
	err   error
}

func (e *unreachableError) Error() string {
	envVar, example := "REDIS_ADDR", "REDIS_ADDR=127.0.0.1:6379"
	if e.which == "MySQL" {
		envVar, example = "MYSQL_DSN", "MYSQL_DSN='root@tcp(127.0.0.1:3306)/'"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cannot reach %s at %s: %v\n", e.which, e.addr, e.err)
	fmt.Fprintf(&b, "  start the servers from the repository root with:  docker compose up -d\n")
	fmt.Fprintf(&b, "  or point the example at a running %s with %s, e.g.  %s go run ./examples/inventory", e.which, envVar, example)
	return b.String()
}

func (e *unreachableError) Unwrap() error { return e.err }

// checkRedis pings Redis at addr.
func checkRedis(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return &unreachableError{which: "Redis", addr: addr, err: err}
	}
	return nil
}

// openDatabase creates the example's database when it does not exist,
// applies the schema and returns a pool of at most poolSize connections.
func openDatabase(ctx context.Context, s servers, poolSize int) (*sqlx.DB, error) {
	cfg, err := mysql.ParseDSN(s.mysqlDSN)
	if err != nil {
		return nil, err
	}
	addr := cfg.Addr
	admin := cfg.Clone()
	admin.DBName = ""
	adb, err := sql.Open("mysql", admin.FormatDSN())
	if err != nil {
		return nil, &unreachableError{which: "MySQL", addr: addr, err: err}
	}
	defer adb.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := adb.PingContext(pctx); err != nil {
		return nil, &unreachableError{which: "MySQL", addr: addr, err: err}
	}
	if _, err := adb.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+strings.ReplaceAll(s.database, "`", "``")+"`"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", s.database, err)
	}
	db, err := openPool(s.mysqlDSN, poolSize)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, db.DB); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// openPool opens a pool on dsn; it does not connect.
func openPool(dsn string, poolSize int) (*sqlx.DB, error) {
	db, err := sqlx.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(poolSize)
	db.SetMaxIdleConns(poolSize)
	return db, nil
}

// isUnreachable reports whether err is a dependency the user must start.
func isUnreachable(err error) bool {
	var u *unreachableError
	return errors.As(err, &u)
}
