package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// defaultKeyPrefix starts the Redis keys of the example's locks.
const defaultKeyPrefix = "redfence-inventory"

// lockKey is the lock, and fence, name of a SKU.
func lockKey(sku string) string { return "inventory:" + sku }

// instance is one simulated application instance: a Redis client, a Locker,
// a database pool and a Guard of its own, as separate processes would have.
type instance struct {
	name   string
	rdb    *redis.Client
	health *redis.Client // for checks only: honours their deadlines
	locker *redislock.Locker
	db     *sqlx.DB
	guard  *guard.Guard
	// batched is a Guard on the same Locker and pool with
	// Options.Batch.Max (the batched mode).
	batched *guard.Guard
	frozen  *freezer
	logger  *slog.Logger

	fallback bool        // the Guard falls back on the database while Redis is down
	hooks    guard.Hooks // more hooks of the Guard (metrics)

	// onAcquired, when set, runs when guard.Do has taken the lock, before
	// its transaction starts (the example injects stalls there).
	onAcquired func()
	// onDone, when set, runs as guard.Do returns (the demo counts the
	// orders served in each mode there).
	onDone func(guard.Result)

	// Switches of the Guard between Redis and database mode.
	toDatabase, toRedis atomic.Int64
}

// instanceConfig is what every instance of a run shares.
type instanceConfig struct {
	servers  servers
	prefix   string // of the Redis keys
	poolSize int
	lease    time.Duration
	logger   *slog.Logger

	// fallback turns on guard.FallbackDatabase, and gives the lock's Redis
	// client short timeouts so that a dead or frozen Redis is noticed in a
	// fraction of a second rather than after go-redis's default 3s read
	// timeout.
	fallback bool
	// hooks are added to the Guard's own.
	hooks guard.Hooks
}

// Timeouts of the lock's Redis client when the Guard falls back on the
// database: a Redis that does not answer within them counts as down.
const (
	fallbackDialTimeout = 200 * time.Millisecond
	fallbackIOTimeout   = 300 * time.Millisecond
	// fallbackRetry is Options.Outage.Retry: the example's outages last
	// seconds, and its Guards try Redis again well within them.
	fallbackRetry = 250 * time.Millisecond
)

func newInstance(name string, c instanceConfig) (*instance, error) {
	inst := &instance{name: name, frozen: newFreezer(), logger: c.logger, fallback: c.fallback, hooks: c.hooks}
	opt := c.servers.redisOptions()
	opt.PoolSize = c.poolSize * 2
	if c.fallback {
		opt.DialTimeout = fallbackDialTimeout
		opt.ReadTimeout, opt.WriteTimeout = fallbackIOTimeout, fallbackIOTimeout
		opt.MaxRetries = 1
	}
	inst.rdb = redis.NewClient(opt)
	inst.health = newHealthClient(c.servers.redisOptions())
	inst.rdb.AddHook(inst.frozen)
	inst.locker = redislock.New(inst.rdb, &redislock.Options{Prefix: c.prefix, LeaseTTL: c.lease, Logger: c.logger})
	db, err := openPool(c.servers.mysqlDSN, c.poolSize)
	if err != nil {
		inst.close()
		return nil, err
	}
	inst.db = db
	inst.guard = newGuard(inst, 0)
	inst.batched = newGuard(inst, batchSize)
	return inst, nil
}

// newGuard returns a Guard on inst's Locker and pool, combining up to
// maxBatch queued callers per transaction (0: none).
func newGuard(inst *instance, maxBatch int) *guard.Guard {
	h := inst.hooks
	own := guard.Hooks{
		OnAcquired: func(string, uint64, time.Duration) {
			if inst.onAcquired != nil {
				inst.onAcquired()
			}
		},
		OnDone: func(_ context.Context, r guard.Result) {
			if inst.onDone != nil {
				inst.onDone(r)
			}
		},
		OnModeChange: func(_, to guard.Mode) {
			if to == guard.ModeDatabase {
				inst.toDatabase.Add(1)
			} else {
				inst.toRedis.Add(1)
			}
		},
	}
	h.OnAcquired = then3(own.OnAcquired, h.OnAcquired)
	h.OnDone = then2(own.OnDone, h.OnDone)
	h.OnModeChange = then2(own.OnModeChange, h.OnModeChange)
	opt := &guard.Options{Logger: inst.logger, Hooks: h, Batch: guard.BatchOptions{Max: maxBatch}}
	if inst.fallback {
		opt.Outage = guard.OutageOptions{Fallback: guard.FallbackDatabase, Retry: fallbackRetry}
	}
	return guard.New(inst.locker, inst.db, opt)
}

// then2 and then3 return a hook that calls f, then g when it is set.
func then2[A, B any](f, g func(A, B)) func(A, B) {
	if g == nil {
		return f
	}
	return func(a A, b B) { f(a, b); g(a, b) }
}

func then3[A, B, C any](f, g func(A, B, C)) func(A, B, C) {
	if g == nil {
		return f
	}
	return func(a A, b B, c C) { f(a, b, c); g(a, b, c) }
}

// mode returns how inst's Guards hold keys now, as their switches tell.
func (inst *instance) mode() guard.Mode {
	if inst.toDatabase.Load() > inst.toRedis.Load() {
		return guard.ModeDatabase
	}
	return guard.ModeRedis
}

func (inst *instance) close() error {
	var errs []error
	if inst.locker != nil {
		errs = append(errs, inst.locker.Close())
	}
	if inst.rdb != nil {
		errs = append(errs, inst.rdb.Close())
	}
	if inst.health != nil {
		errs = append(errs, inst.health.Close())
	}
	if inst.db != nil {
		errs = append(errs, inst.db.Close())
	}
	return errors.Join(errs...)
}

// newInstances starts n instances named app-1..app-n.
func newInstances(n int, c instanceConfig) ([]*instance, error) {
	out := make([]*instance, 0, n)
	for i := range n {
		inst, err := newInstance(fmt.Sprintf("app-%d", i+1), c)
		if err != nil {
			closeInstances(out)
			return nil, err
		}
		out = append(out, inst)
	}
	return out, nil
}

func closeInstances(insts []*instance) {
	for _, inst := range insts {
		_ = inst.close()
	}
}

// newHealthClient returns a small client for checks. Unlike the lock's
// client, it bounds every read by the ctx deadline (go-redis otherwise waits
// out its own ReadTimeout on a server that accepts and never answers) and
// tries once: a check reports, it does not retry.
func newHealthClient(opt *redis.Options) *redis.Client {
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.PoolSize = 2
	return redis.NewClient(opt)
}

// checks are inst's dependencies: Redis through a client of its own for
// checks, MySQL through inst's pool.
func (inst *instance) checks() []check {
	return []check{
		{name: "redis", ping: func(ctx context.Context) error { return inst.health.Ping(ctx).Err() }},
		{name: "mysql", ping: func(ctx context.Context) error { return inst.db.PingContext(ctx) }},
	}
}
