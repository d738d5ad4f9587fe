package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/internal/redact"
)

// Defaults shared with the test suite (internal/testenv) and docker-compose.yml.
const (
	defaultRedisAddr = "127.0.0.1:6379"
	defaultMySQLDSN  = "root@tcp(127.0.0.1:3306)/"
	defaultDatabase  = "redfence_inventory"
)

// servers names where Redis and MySQL are.
type servers struct {
	redisAddr string // host:port, or a redis:// URL that carries credentials
	mysqlDSN  string // with the example's database selected
	database  string

	// What this run started for each server, for the user; empty when the
	// server is the configured one.
	redisStarted, mysqlStarted string
}

// serversFromEnv reads REDIS_ADDR and MYSQL_DSN. A DSN that selects no
// database gets database (created on first use). Settings that cannot be
// parsed are reported as such.
func serversFromEnv(database string) (servers, error) {
	s := servers{redisAddr: os.Getenv("REDIS_ADDR"), mysqlDSN: os.Getenv("MYSQL_DSN")}
	if s.redisAddr == "" {
		s.redisAddr = defaultRedisAddr
	}
	if s.mysqlDSN == "" {
		s.mysqlDSN = defaultMySQLDSN
	}
	var problems []*serverProblem
	if _, err := parseRedisAddr(s.redisAddr); err != nil {
		problems = append(problems, &serverProblem{which: "Redis", addr: redact.RedisAddr(s.redisAddr), kind: problemConfig,
			err: fmt.Errorf("REDIS_ADDR is neither host:port nor a redis:// URL: %w", err), setting: s.redisAddr})
	}
	cfg, err := mysql.ParseDSN(s.mysqlDSN)
	if err != nil {
		problems = append(problems, &serverProblem{which: "MySQL", addr: redact.DSN(s.mysqlDSN), kind: problemConfig,
			err: fmt.Errorf("MYSQL_DSN is not a valid DSN: %w", err), setting: s.mysqlDSN})
	} else {
		if cfg.DBName == "" {
			cfg.DBName = database
		}
		s.database = cfg.DBName
		s.mysqlDSN = cfg.FormatDSN()
	}
	if len(problems) > 0 {
		return s, &serversError{problems: problems}
	}
	return s, nil
}

// parseRedisAddr reads host:port, or a redis:// or rediss:// URL for a
// server that wants a user name, a password or TLS.
func parseRedisAddr(addr string) (*redis.Options, error) {
	if strings.Contains(addr, "://") {
		return redis.ParseURL(addr)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	return &redis.Options{Addr: addr}, nil
}

// redisOptions returns the connection settings of Redis; serversFromEnv
// has checked that they parse.
func (s servers) redisOptions() *redis.Options {
	opt, err := parseRedisAddr(s.redisAddr)
	if err != nil {
		return &redis.Options{Addr: s.redisAddr}
	}
	return opt
}

// mysqlAddr is the host:port of MySQL, for messages.
func (s servers) mysqlAddr() string {
	if cfg, err := mysql.ParseDSN(s.mysqlDSN); err == nil {
		return cfg.Addr
	}
	return redact.DSN(s.mysqlDSN)
}

// describe says in one line where the servers are, for the report.
func (s servers) describe() string {
	where := func(addr, started string) string {
		if started == "" {
			return addr
		}
		return addr + " (" + started + ")"
	}
	d := "Redis at " + where(s.redisOptions().Addr, s.redisStarted) + ", MySQL at " + where(s.mysqlAddr(), s.mysqlStarted)
	if s.redisStarted != "" || s.mysqlStarted != "" {
		d += "; what this run started is removed when it ends"
	}
	return d
}

// checkRedis pings Redis; the error says whether it is down or refuses the
// credentials.
func checkRedis(ctx context.Context, s servers) error {
	if p := probeRedis(ctx, s); p != nil {
		return &serversError{problems: []*serverProblem{p}}
	}
	return nil
}

// openDatabase creates the example's database when it does not exist,
// applies the schema and returns a pool of at most poolSize connections.
func openDatabase(ctx context.Context, s servers, poolSize int) (*sqlx.DB, error) {
	cfg, err := mysql.ParseDSN(s.mysqlDSN)
	if err != nil {
		return nil, &serversError{problems: []*serverProblem{{which: "MySQL", addr: redact.DSN(s.mysqlDSN), kind: problemConfig,
			err: fmt.Errorf("MYSQL_DSN is not a valid DSN: %w", err), setting: s.mysqlDSN}}}
	}
	admin := cfg.Clone()
	admin.DBName = ""
	adb, err := sql.Open("mysql", admin.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer adb.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := adb.PingContext(pctx); err != nil {
		return nil, &serversError{problems: []*serverProblem{mysqlProblem(cfg.Addr, err)}}
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
