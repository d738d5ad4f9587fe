package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/redact"
)

// probeTimeout bounds each server's first answer. Both are probed at once,
// so a program whose servers are missing says so in about this long.
const probeTimeout = time.Second

// errProbeTimeout: the server did not answer within probeTimeout.
var errProbeTimeout = fmt.Errorf("no answer within %v", probeTimeout)

// probe asks both servers at once, each under its own deadline, and returns
// what is wrong with each, Redis first.
func probe(ctx context.Context, s servers) []*serverProblem {
	var wg sync.WaitGroup
	var rp, mp *serverProblem
	wg.Go(func() { rp = probeRedis(ctx, s) })
	wg.Go(func() { mp = probeMySQL(ctx, s) })
	wg.Wait()
	var out []*serverProblem
	for _, p := range []*serverProblem{rp, mp} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// probeRedis sends one PING with the configured credentials; nil means
// Redis answered.
func probeRedis(ctx context.Context, s servers) *serverProblem {
	opt := s.redisOptions()
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = probeTimeout, probeTimeout, probeTimeout
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := rdb.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	return redisProblem(opt.Addr, timedOut(ctx, err))
}

// probeMySQL opens one connection, with no database selected (the program
// creates its own), and closes it; nil means MySQL let the user in.
func probeMySQL(ctx context.Context, s servers) *serverProblem {
	cfg, err := mysql.ParseDSN(s.mysqlDSN)
	if err != nil {
		return &serverProblem{which: "MySQL", addr: redact.DSN(s.mysqlDSN), kind: problemConfig,
			err: fmt.Errorf("MYSQL_DSN is not a valid DSN: %w", err), setting: s.mysqlDSN}
	}
	cfg.DBName = ""
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = probeTimeout, probeTimeout, probeTimeout
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return &serverProblem{which: "MySQL", addr: cfg.Addr, kind: problemConfig, err: fmt.Errorf("MYSQL_DSN: %w", err), setting: s.mysqlDSN}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := conn.Connect(ctx)
	if err != nil {
		return mysqlProblem(cfg.Addr, timedOut(ctx, err))
	}
	_ = c.Close()
	return nil
}

// timedOut replaces the error of an attempt cut short by its deadline with
// errProbeTimeout, which counts as "does not answer".
func timedOut(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (%v)", errProbeTimeout, err)
	}
	return err
}
