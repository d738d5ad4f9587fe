package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/redact"
)

// dialTimeout bounds each connection attempt, so that a server that does not
// answer is reported well within -timeout.
const dialTimeout = 3 * time.Second

// openRedis returns a client for c's Redis server once it has answered a
// PING.
func openRedis(ctx context.Context, c *config) (*redis.Client, error) {
	opt := &redis.Options{Addr: c.redisAddr}
	if strings.Contains(c.redisAddr, "://") {
		var err error
		if opt, err = redis.ParseURL(c.redisAddr); err != nil {
			// The URL parser quotes the URL, password included.
			return nil, usageErrorf("Redis address from %s is not a valid URL: %s", c.redisFrom, redact.Text(err.Error(), c.redisAddr))
		}
	}
	opt.DialTimeout, opt.MaxRetries, opt.ContextTimeoutEnabled = dialTimeout, -1, true
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if _, answered := errors.AsType[redis.Error](err); answered {
			return nil, fmt.Errorf("Redis at %s refused the PING: %w", opt.Addr, err)
		}
		return nil, unreachable("Redis", opt.Addr, c.redisFrom, err)
	}
	return rdb, nil
}

// mysqlConfig parses c's DSN and applies -database; it connects nowhere.
func mysqlConfig(c *config) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(c.mysqlDSN)
	if err != nil {
		return nil, usageErrorf("MySQL DSN from %s is not a valid DSN: %s", c.dsnFrom, redact.Text(err.Error(), c.mysqlDSN))
	}
	if c.database != "" {
		cfg.DBName = c.database
	}
	if cfg.DBName == "" {
		return nil, usageErrorf("no database selected: pass -database, or name one in the DSN (%s)", c.dsnFrom)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = dialTimeout
	}
	return cfg, nil
}

// openMySQL returns a pool on c's database once a connection has been made.
func openMySQL(ctx context.Context, c *config) (*sqlx.DB, *mysql.Config, error) {
	cfg, err := mysqlConfig(c)
	if err != nil {
		return nil, nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, usageErrorf("MySQL DSN from %s: %s", c.dsnFrom, redact.Text(err.Error(), c.mysqlDSN))
	}
	db := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		if me, answered := errors.AsType[*mysql.MySQLError](err); answered {
			if me.Number == 1049 { // ER_BAD_DB_ERROR
				return nil, nil, fmt.Errorf("database %q does not exist on MySQL at %s: %w", cfg.DBName, cfg.Addr, err)
			}
			return nil, nil, fmt.Errorf("MySQL at %s refused user %q: %w", cfg.Addr, cfg.User, err)
		}
		return nil, nil, unreachable("MySQL", cfg.Addr, c.dsnFrom, err)
	}
	return db, cfg, nil
}
