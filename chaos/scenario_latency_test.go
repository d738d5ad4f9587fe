package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// Scenario 4: slow and delayed database writes. One client reaches MySQL
// through a proxy adding latency both ways while others buy at full speed.
// Then, twice, its statements are held back entirely after it was granted
// the lock, its lock is lost meanwhile (round 0: it is cut off from Redis
// and notices; round 1: Redis restarts empty and it does not notice before
// its next renewal), another client commits with a newer token, and the
// held statements are released: the late claim and write must not apply.
func TestScenarioDatabaseLatency(t *testing.T) {
	e := newEnv(t, "db-latency", 2000)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 120*time.Second)
	mpx := NewProxy(t, "slow-mysql", e.mysqlAddr())
	rpx := NewProxy(t, "slow-redis", srv.Addr)
	slowDB := e.open(e.dsnVia(mpx.Addr, nil))
	srdb := redis.NewClient(&redis.Options{Addr: rpx.Addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = srdb.Close() })
	lo := fastLocks
	slow := e.newClient(srdb, slowDB, lockOpts{lease: 3 * time.Second, waiter: time.Second, recheck: 250 * time.Millisecond})
	load := []*client{e.newClient(srv.Client(), e.db, lo), e.newClient(srv.Client(), e.db, lo)}

	lat := []*Toxic{}
	for _, d := range []Direction{Upstream, Downstream} {
		x, err := mpx.Latency(d, 30)
		mustNoErr(t, err, "latency")
		lat = append(lat, x)
	}
	mustNoErr(t, slowDB.PingContext(ctx), "warm the slow pool")

	// Phase 1: the slow client buys among fast ones.
	lctx, stop := context.WithTimeout(ctx, 2500*time.Millisecond)
	e.load(lctx, 15*time.Millisecond, append(load, slow)...)()
	stop()

	// A second slow client, same paths, with a long lease: it renews only
	// every 4s, so it does not notice a lost lock before its held claim
	// is released.
	slowLong := e.newClient(srdb, slowDB, lockOpts{lease: 12 * time.Second, waiter: time.Second, recheck: 250 * time.Millisecond})
	for round := 0; round < 2; round++ {
		sc := slow
		if round == 1 {
			sc = slowLong
		}
		// Let the others buy, then grant the lock to the slow client on a
		// quiet key (a fresh grant, not a hand-off).
		lctx, stop := context.WithTimeout(ctx, 600*time.Millisecond)
		e.load(lctx, 15*time.Millisecond, load...)()
		stop()
		t1, res, hold := buyHeld(ctx, t, sc, mpx, 15*time.Second)
		var heal func() error
		var err error
		if round == 0 {
			heal, err = rpx.Partition()
			mustNoErr(t, err, "cut the slow client from Redis")
		} else {
			srv.Restart()
		}
		lctx, stop = context.WithCancel(ctx)
		waitLoad := e.load(lctx, 15*time.Millisecond, load...)
		t2, err := e.awaitCommit(ctx, t1, 20*time.Second)
		if err != nil {
			stop()
			waitLoad()
			t.Fatalf("no newer holder committed while the slow client's statements were held: %v", err)
		}
		mustNoErr(t, hold.Remove(), "release held statements")
		var op Op
		select {
		case op = <-res:
		case <-time.After(30 * time.Second):
			t.Fatal("slow client's Do did not return")
		}
		stop()
		waitLoad()
		t.Logf("round %d: slow client token %d (newer committed: %d): %s %s", round, t1, t2, op.Outcome, op.Err)
		if op.Outcome == Accepted {
			t.Errorf("round %d: delayed write with token %d accepted after token %d committed", round, t1, t2)
		}
		if n := e.ordersOf(op.ID); n != 0 {
			t.Errorf("round %d: delayed write applied (%d orders)", round, n)
		}
		if round == 1 && op.Outcome != Fenced {
			t.Errorf("round %d: the database should have fenced the stale claim, got %s", round, op.Outcome)
		}
		if heal != nil {
			mustNoErr(t, heal(), "heal")
		}
	}
	for _, x := range lat {
		mustNoErr(t, x.Remove(), "remove latency")
	}
	lctx, stop = context.WithTimeout(ctx, time.Second)
	e.load(lctx, 15*time.Millisecond, append(load, slow)...)()
	stop()
	e.finish()
}
