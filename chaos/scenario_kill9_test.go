package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// Scenario 6: holder and waiter processes killed with SIGKILL while others
// are queued. A killed holder (inside fn, transaction open) must not stall
// the queue beyond its lease; a killed waiter must not stall the waiters
// behind it beyond the waiter timeout. The Guards hold the lock until the
// transaction ends (guard.HandOffAtEnd, no relaying), so that the killed
// holder still holds the Redis lock and both waiters queue in Redis; with
// the defaults its lock is handed on at the claim, and a killed holder's
// transaction ends with its connection (paused-holder-handoff covers a
// holder stopped there).
func TestScenarioKilledProcesses(t *testing.T) {
	e := newEnv(t, "killed-processes", 5000)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 120*time.Second)
	rdb := srv.Client()
	lo := fastLocks
	lo.atEnd = true
	cfg := HolderConfig{Redis: srv.Addr, DSN: e.dsn, Item: e.item, Prefix: e.prefix,
		LeaseTTL: lo.lease, WaiterTimeout: lo.waiter, Recheck: lo.recheck, AtEnd: true}
	bin := holder(t)
	hs := []*Holder{StartHolder(t, bin, cfg), StartHolder(t, bin, cfg), StartHolder(t, bin, cfg)}
	ids := []int{101, 102, 103}
	local := e.newClient(srv.Client(), e.db, lo)
	load := []*client{e.newClient(srv.Client(), e.db, lo), e.newClient(srv.Client(), e.db, lo)}
	warm := func() {
		lctx, stop := context.WithTimeout(ctx, 700*time.Millisecond)
		e.load(lctx, 15*time.Millisecond, load...)()
		stop()
	}
	// Killing a process may leave its lock or queue entry behind; each
	// round starts on a quiet lock.
	quiet := func() { mustNoErr(t, e.awaitQueue(ctx, rdb, 0, 5*time.Second), "quiet queue") }
	bound := func(timeout time.Duration) time.Duration { return timeout + 2*lo.recheck + 1500*time.Millisecond }

	for round := 0; round < 2; round++ {
		warm()
		quiet()
		// A holder is killed inside fn with two processes queued behind it.
		victim := e.sendBuy(hs[0], ids[0], 1, true)
		ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, err := infn(ictx, hs[0])
		icancel()
		if err != nil {
			e.dumpRedis(rdb)
			t.Fatalf("holder inside fn: %v", err)
		}
		b1 := e.sendBuy(hs[1], ids[1], 1, false)
		mustNoErr(t, e.awaitQueue(ctx, rdb, 1, 5*time.Second), "first waiter queued")
		b2 := e.sendBuy(hs[2], ids[2], 1, false)
		mustNoErr(t, e.awaitQueue(ctx, rdb, 2, 5*time.Second), "second waiter queued")
		hs[0].Kill()
		killed := time.Now()
		victim.lost("killed with SIGKILL inside fn")
		for i, b := range []*procBuy{b1, b2} {
			op, err := b.done(ctx)
			mustNoErr(t, err, "queued holder")
			waited := time.Since(killed)
			t.Logf("round %d: queued holder %d after the holder was killed: %s in %v", round, i+1, op.Outcome, waited.Round(time.Millisecond))
			if op.Outcome != Accepted {
				t.Errorf("queued holder %d: %s %s", i+1, op.Outcome, op.Err)
			}
			if waited > bound(lo.lease) {
				t.Errorf("queue moved %v after the holder was killed; bound %v", waited, bound(lo.lease))
			}
		}
		hs[0] = StartHolder(t, bin, cfg)

		warm()
		quiet()
		// A waiter is killed while queued between a holder and another waiter.
		holding, release := make(chan struct{}), make(chan struct{})
		res := make(chan Op, 1)
		go func() {
			res <- local.buy(ctx, 1, 20*time.Second, func(context.Context, *guard.Tx) error {
				close(holding)
				<-release
				return nil
			})
		}()
		<-holding
		w1 := e.sendBuy(hs[1], ids[1], 1, false)
		mustNoErr(t, e.awaitQueue(ctx, rdb, 1, 5*time.Second), "doomed waiter queued")
		w2 := e.sendBuy(hs[2], ids[2], 1, false)
		mustNoErr(t, e.awaitQueue(ctx, rdb, 2, 5*time.Second), "waiter behind it queued")
		hs[1].Kill()
		w1.lost("killed with SIGKILL while waiting")
		close(release)
		released := time.Now()
		if op := <-res; op.Outcome != Accepted {
			t.Errorf("holder: %s %s", op.Outcome, op.Err)
		}
		op, err := w2.done(ctx)
		mustNoErr(t, err, "waiter behind the killed one")
		waited := time.Since(released)
		t.Logf("round %d: waiter behind the killed waiter: %s %v after the release", round, op.Outcome, waited.Round(time.Millisecond))
		if op.Outcome != Accepted {
			t.Errorf("waiter behind the killed one: %s %s", op.Outcome, op.Err)
		}
		if b := bound(max(lo.waiter, lo.lease)); waited > b {
			t.Errorf("queue moved %v after the release; bound %v", waited, b)
		}
		hs[1] = StartHolder(t, bin, cfg)
	}
	warm()
	e.finish()
}
