package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// Scenario "early-begin": the transactions that calls begin while their
// lock request is in flight. Four application instances, each with a pool
// of its own of three connections, buy on one key through a Redis that
// answers late, so that a call's BEGIN runs beside its lock request and
// Redis grants some at once and queues the others (whose transactions are
// given back). Meanwhile Redis is cut off twice (lock requests fail after
// their BEGIN was sent) and MySQL slows down. Histories must be
// linearizable and nothing oversold, and after the load every connection
// of every pool is back.
func TestScenarioEarlyBegin(t *testing.T) {
	e := newEnv(t, "early-begin", 100_000)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 90*time.Second)
	rpx := NewProxy(t, "late-redis", srv.Addr)
	mpx := NewProxy(t, "slow-mysql", e.mysqlAddr())
	var cs []*client
	for i := range 4 {
		rdb := redis.NewClient(&redis.Options{Addr: rpx.Addr, DialTimeout: 300 * time.Millisecond,
			ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: 1})
		t.Cleanup(func() { _ = rdb.Close() })
		addr := ""
		if i%2 == 1 {
			addr = mpx.Addr
		}
		db := e.open(e.dsnVia(addr, nil))
		db.SetMaxOpenConns(3)
		cs = append(cs, e.newClient(rdb, db, fastLocks))
	}
	late, err := rpx.Latency(Downstream, 3)
	mustNoErr(t, err, "Redis latency")

	lctx, stop := context.WithTimeout(ctx, 3*time.Second)
	e.load(lctx, 5*time.Millisecond, cs...)()
	stop()

	lctx, stop = context.WithCancel(ctx)
	wait := e.load(lctx, 5*time.Millisecond, cs...)
	for range 2 {
		time.Sleep(400 * time.Millisecond) // load runs meanwhile
		heal, err := rpx.Partition()
		mustNoErr(t, err, "cut Redis off")
		time.Sleep(300 * time.Millisecond)
		mustNoErr(t, heal(), "heal")
	}
	var slow []*Toxic
	for _, d := range []Direction{Upstream, Downstream} {
		x, err := mpx.Latency(d, 5)
		mustNoErr(t, err, "MySQL latency")
		slow = append(slow, x)
	}
	time.Sleep(1500 * time.Millisecond)
	stop()
	wait()
	for _, x := range append(slow, late) {
		mustNoErr(t, x.Remove(), "remove latency")
	}
	for _, c := range cs {
		deadline := time.Now().Add(5 * time.Second)
		for c.db.Stats().InUse != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("client %d: %d connections still in use after the load", c.id, c.db.Stats().InUse)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if s := e.finish(); s.Accepted == 0 {
		t.Fatal("no buy committed")
	}
}
