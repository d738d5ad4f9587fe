package chaos

import (
	"context"
	"testing"
	"time"
)

// Scenario 1: Redis failover with a lost grant. Replication to the replica
// is cut, a holder is granted the lock on the primary (a grant the replica
// never sees) and its database traffic is held back; the primary is killed,
// Sentinel promotes the replica, and other clients, following Sentinel,
// acquire the "free" lock again and commit. Only then does the stale
// holder's claim reach the database, which must reject it. Buying goes on
// through the new primary.
func TestScenarioFailoverLostGrant(t *testing.T) {
	e := newEnv(t, "failover-lost-grant", 2000)
	tp := StartTopology(t)
	ctx := ctxT(t, 90*time.Second)

	lo := lockOpts{lease: 3 * time.Second, waiter: time.Second, recheck: 250 * time.Millisecond}
	load := []*client{e.newClient(tp.Client(t), e.db, lo), e.newClient(tp.Client(t), e.db, lo)}

	// The stale holder's MySQL path runs through a proxy that will hold its
	// statements; its lease is long, so it does not learn of the loss by
	// itself before its claim arrives (renewal every lease/3).
	mpx := NewProxy(t, "stale-mysql", e.mysqlAddr())
	staleDB := e.open(e.dsnVia(mpx.Addr, nil))
	mustNoErr(t, staleDB.PingContext(ctx), "warm the stale holder's pool")
	stale := e.newClient(tp.Client(t), staleDB, lockOpts{lease: 30 * time.Second, waiter: time.Second, recheck: 250 * time.Millisecond})

	// Phase 1: normal buying through the Sentinel-aware clients.
	lctx, stop := context.WithTimeout(ctx, 2*time.Second)
	e.load(lctx, 15*time.Millisecond, load...)()
	stop()

	// Make sure the replica has everything so far, then cut replication.
	primary := tp.Primary.Client()
	mustNoErr(t, primary.Do(ctx, "WAIT", 1, 2000).Err(), "WAIT for the replica")
	_, err := tp.ReplLink.Partition()
	mustNoErr(t, err, "cut replication")

	t1, staleRes, hold := buyHeld(ctx, t, stale, mpx, 10*time.Second)

	// Kill the primary: the grant dies with it.
	killed := time.Now()
	tp.Primary.Kill()
	mustNoErr(t, tp.WaitPromoted(ctx), "promotion of the replica")
	t.Logf("replica promoted %v after the primary was killed", time.Since(killed).Round(time.Millisecond))

	lctx, stop = context.WithCancel(ctx)
	waitLoad := e.load(lctx, 15*time.Millisecond, load...)
	t2, err := e.awaitCommit(ctx, t1, 20*time.Second)
	if err != nil {
		stop()
		waitLoad()
		t.Fatalf("no commit after the failover with a token above the lost grant's %d: %v", t1, err)
	}
	t.Logf("lost grant token %d; first commit through the new primary with token %d", t1, t2)

	// Release the stale holder's delayed claim.
	mustNoErr(t, hold.Remove(), "release held statements")
	var op Op
	select {
	case op = <-staleRes:
	case <-time.After(30 * time.Second):
		t.Fatal("the stale holder's Do did not return")
	}
	t.Logf("stale holder: %s %v", op.Outcome, op.Err)
	if op.Outcome != Fenced {
		t.Errorf("stale holder (token %d, below committed %d): got %s (%s), want fenced", t1, t2, op.Outcome, op.Err)
	}
	if n := e.ordersOf(op.ID); n != 0 {
		t.Errorf("stale holder's write was applied (%d orders)", n)
	}

	// Keep buying through the new primary for a while.
	select {
	case <-time.After(1500 * time.Millisecond):
	case <-ctx.Done():
	}
	stop()
	waitLoad()
	sum := e.finish()
	if sum.Accepted == 0 {
		t.Error("nothing was bought")
	}
}
