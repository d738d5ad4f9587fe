package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// Scenario 3: a partition between one client and Redis. While the client
// holds the lock (blackhole: packets vanish), it must notice the loss within
// about a lease and abort, and the others must get the lock. While it waits
// in the queue (reset_peer: its connections are reset), the queue behind it
// must keep moving within the lease and waiter timeout. The Guards hold the
// lock until the transaction ends (guard.HandOffAtEnd, no relaying): with
// the defaults a holder gives the lock up at its claim and no longer needs
// Redis, so there is no loss to notice while it holds.
func TestScenarioRedisPartition(t *testing.T) {
	e := newEnv(t, "redis-partition", 2000)
	ctx := ctxT(t, 90*time.Second)
	lo := fastLocks
	lo.atEnd = true
	srv, px, victim, load := partitionSetup(t, e, "victim-redis", lo)

	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.load(lctx, 15*time.Millisecond, load...)
	stopLoad := func() { stop(); waitLoad() }

	// While holding.
	for round := 0; round < 2; round++ {
		inFn := make(chan struct{})
		res := make(chan Op, 1)
		go func() {
			res <- victim.buy(ctx, 1, 20*time.Second, func(ctx context.Context, _ *guard.Tx) error {
				close(inFn)
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(10 * time.Second):
					return errors.New("lock loss not noticed within 10s")
				}
			})
		}()
		select {
		case <-inFn:
		case <-time.After(15 * time.Second):
			stopLoad()
			t.Fatal("victim never got the lock")
		}
		heal, err := px.Partition()
		mustNoErr(t, err, "partition")
		cut := time.Now()
		op := <-res
		noticed := time.Since(cut)
		t.Logf("holding round %d: victim (token %d) returned %s after %v: %s", round, op.Token, op.Outcome, noticed.Round(time.Millisecond), op.Err)
		if op.Outcome == Accepted {
			t.Errorf("partitioned holder's buy was accepted")
		}
		if noticed > 2*lo.lease+500*time.Millisecond {
			t.Errorf("loss noticed after %v, lease is %v", noticed, lo.lease)
		}
		t2, err := e.awaitCommit(ctx, op.Token, lo.lease+3*time.Second)
		if err != nil {
			t.Errorf("queue stalled after the holder was partitioned: %v", err)
		} else {
			t.Logf("holding round %d: next commit (token %d) %v after the cut", round, t2, time.Since(cut).Round(time.Millisecond))
		}
		mustNoErr(t, heal(), "heal")
	}

	// While waiting: quiet the load so the queue order is known.
	stopLoad()
	rdb := srv.Client()
	holding, release := make(chan struct{}), make(chan struct{})
	holderRes := make(chan Op, 1)
	blocker := e.newClient(srv.Client(), e.db, lo)
	go func() {
		holderRes <- blocker.buy(ctx, 1, 20*time.Second, func(context.Context, *guard.Tx) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	victimRes := make(chan Op, 1)
	go func() { victimRes <- victim.buy(ctx, 1, 6*time.Second, nil) }()
	mustNoErr(t, e.awaitQueue(ctx, rdb, 1, 5*time.Second), "victim queued")
	behind := make(chan Op, 2)
	for _, c := range load {
		go func() { behind <- c.buy(ctx, 1, 20*time.Second, nil) }()
	}
	mustNoErr(t, e.awaitQueue(ctx, rdb, 3, 5*time.Second), "two clients queued behind the victim")
	// Both directions: a grant pushed over the victim's subscription would
	// otherwise still reach it (and it could rightly use it).
	rstUp, err := px.ResetPeer(Upstream)
	mustNoErr(t, err, "reset_peer upstream")
	rstDown, err := px.ResetPeer(Downstream)
	mustNoErr(t, err, "reset_peer downstream")
	close(release)
	released := time.Now()
	if op := <-holderRes; op.Outcome != Accepted {
		t.Errorf("blocking holder: %s %s", op.Outcome, op.Err)
	}
	for range load {
		op := <-behind
		waited := time.Since(released)
		t.Logf("waiting round: client behind the partitioned waiter got %s %v after the release", op.Outcome, waited.Round(time.Millisecond))
		if op.Outcome != Accepted {
			t.Errorf("client queued behind the partitioned waiter: %s %s", op.Outcome, op.Err)
		}
		if bound := lo.lease + lo.waiter + 2*lo.recheck + 1500*time.Millisecond; waited > bound {
			t.Errorf("queue behind the partitioned waiter moved after %v, bound %v", waited, bound)
		}
	}
	vop := <-victimRes
	t.Logf("waiting round: partitioned waiter returned %s: %s", vop.Outcome, vop.Err)
	if vop.Outcome == Accepted {
		t.Error("the partitioned waiter's buy was accepted")
	}
	mustNoErr(t, rstUp.Remove(), "heal reset_peer")
	mustNoErr(t, rstDown.Remove(), "heal reset_peer")

	// After healing, the victim buys normally again.
	lctx, stop = context.WithTimeout(ctx, 1500*time.Millisecond)
	e.load(lctx, 15*time.Millisecond, append(load, victim)...)()
	stop()
	sum := e.finish()
	if sum.Accepted == 0 {
		t.Error("nothing was bought")
	}
}

// Scenario 3b: a partition between one client and Redis right after the
// client was granted the lock, with the defaults, which hand the lock on at
// the claim. The claim does not need Redis, so the client claims, runs fn
// and commits; the unlock that hands the lock on meets the partition and
// fails, and the lock stays in Redis until its lease ends. The buy must be
// accepted (the transaction was fenced and committed), and the others must
// get the lock within about a lease.
func TestScenarioRedisPartitionAtHandOff(t *testing.T) {
	e := newEnv(t, "redis-partition-handoff", 2000)
	ctx := ctxT(t, 90*time.Second)
	lo := fastLocks
	_, px, victim, load := partitionSetup(t, e, "victim-redis-handoff", lo)

	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.load(lctx, 15*time.Millisecond, load...)
	defer func() { stop(); waitLoad() }()

	for round := 0; round < 3; round++ {
		time.Sleep(300 * time.Millisecond) // a window of normal buying
		var heal func() error
		var cut time.Time
		cutErr := make(chan error, 1)
		// OnAcquired runs before the claim: cut the victim off from Redis
		// between its grant and its hand-off.
		victim.onAcquired(func(uint64) {
			victim.onAcquired(nil)
			var err error
			heal, err = px.Partition()
			cut = time.Now()
			cutErr <- err
		})
		op := victim.buy(ctx, 1, 20*time.Second, nil)
		mustNoErr(t, <-cutErr, "partition")
		t.Logf("round %d: victim (token %d) returned %s %v after the cut: %s", round, op.Token, op.Outcome, time.Since(cut).Round(time.Millisecond), op.Err)
		if op.Outcome != Accepted {
			t.Errorf("round %d: the victim's buy, claimed and committed without Redis, was %s (%s), want accepted", round, op.Outcome, op.Err)
		}
		t2, err := e.awaitCommit(ctx, op.Token, lo.lease+3*time.Second)
		if err != nil {
			t.Errorf("round %d: queue stalled after the victim's hand-off failed: %v", round, err)
		} else {
			t.Logf("round %d: next commit (token %d) %v after the cut", round, t2, time.Since(cut).Round(time.Millisecond))
		}
		mustNoErr(t, heal(), "heal")
	}
	stop()
	waitLoad()
	if sum := e.finish(); sum.Accepted == 0 {
		t.Error("nothing was bought")
	}
}

// partitionSetup starts the partition scenarios' Redis server, a proxy in
// front of it named proxyName, a victim client that reaches Redis through
// the proxy (with short timeouts, so that a partition shows quickly) and two
// load clients that reach it directly, all with lock options lo.
func partitionSetup(t *testing.T, e *env, proxyName string, lo lockOpts) (srv *testenv.Server, px *Proxy, victim *client, load []*client) {
	srv = testenv.RedisServer(t)
	px = NewProxy(t, proxyName, srv.Addr)
	vrdb := redis.NewClient(&redis.Options{Addr: px.Addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = vrdb.Close() })
	victim = e.newClient(vrdb, e.db, lo)
	load = []*client{e.newClient(srv.Client(), e.db, lo), e.newClient(srv.Client(), e.db, lo)}
	return srv, px, victim, load
}
