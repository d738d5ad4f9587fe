package redislock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// A holder that crashes (no renewal, no unlock) is replaced when its lease
// ends: the first waiter re-checks at the holder's lease end, not after its
// own re-check interval.
func TestDeadHolderReplacedAtLeaseEnd(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	crashing := newTestLocker(t, rdb, &Options{Prefix: prefix, LeaseTTL: 400 * time.Millisecond})
	l := newTestLocker(t, testenv.Redis(t), &Options{Prefix: prefix, WaiterTimeout: 10 * time.Second,
		RecheckInterval: 3 * time.Second})
	dead := mustLock(t, crashing, "dead-holder")
	crashing.renew.remove(dead) // crash: renewal stops, nobody unlocks
	start := time.Now()
	lk := mustLock(t, l, "dead-holder")
	el := time.Since(start)
	if lk.Token() <= dead.Token() {
		t.Fatalf("token %d not above the dead holder's %d", lk.Token(), dead.Token())
	}
	// The lease had at most 400ms left; one re-check interval is 3s.
	if el >= l.opt.RecheckInterval {
		t.Fatalf("waiter took %v after a dead holder, more than one re-check interval", el)
	}
	mustUnlock(t, lk)
}

// A waiter that stops heartbeating is dropped within WaiterTimeout; the live
// waiter behind it gets the lock without waiting for a full lease.
func TestDeadWaiterDoesNotStallQueue(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 30 * time.Second, WaiterTimeout: 600 * time.Millisecond,
		RecheckInterval: 100 * time.Millisecond})
	ctx := testCtx(t)
	holder := mustLock(t, l, "dead-waiter")
	// A waiter from a process that dies right after queueing.
	dead := &attempt{l: l, key: "dead-waiter", k: l.keys("dead-waiter"), id: "dead.1", owner: "dead.1", lease: l.defLease}
	if r, _, err := dead.call(ctx, argFirst); err != nil || r.granted {
		t.Fatalf("dead waiter enqueue: %+v %v", r, err)
	}
	got := make(chan *Lock, 2)
	go func() {
		lk, err := l.Lock(ctx, "dead-waiter")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	waitFor(t, 5*time.Second, "live waiter queued", func() bool { return len(queue(t, rdb, l, "dead-waiter")) == 2 })
	// Released while the dead waiter still looks alive: the lock goes to it,
	// with only the short hand-off lease.
	start := time.Now()
	mustUnlock(t, holder)
	select {
	case lk := <-got:
		if el := time.Since(start); el > 3*l.opt.WaiterTimeout {
			t.Fatalf("live waiter waited %v behind a dead one", el)
		}
		mustUnlock(t, lk)
	case <-time.After(10 * time.Second): // a full lease would be 30s
		t.Fatal("queue stalled behind a dead waiter")
	}

	// A dead waiter that reaches the head while the lock is held is dropped
	// by the re-checks of the waiters behind it.
	holder = mustLock(t, l, "dead-waiter")
	if r, _, err := dead.call(ctx, argRecheck); err != nil || r.granted {
		t.Fatalf("dead waiter enqueue: %+v %v", r, err)
	}
	go func() {
		lk, err := l.Lock(ctx, "dead-waiter")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	waitFor(t, 5*time.Second, "dead waiter dropped", func() bool {
		q := queue(t, rdb, l, "dead-waiter")
		return len(q) == 1 && q[0] != "dead.1"
	})
	mustUnlock(t, holder)
	mustUnlock(t, <-got)
}

// Live waiters keep their place however long they wait: their entries are
// refreshed, never dropped, never moved back.
func TestLiveWaitersNeverDroppedOrMovedBack(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 5 * time.Second, WaiterTimeout: 300 * time.Millisecond,
		RecheckInterval: 100 * time.Millisecond})
	ctx := testCtx(t)
	holder := mustLock(t, l, "live")
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for _, name := range []string{"first", "second"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := l.Lock(ctx, "live")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			mustUnlock(t, lk)
		}()
		want := map[string]int{"first": 1, "second": 2}[name]
		waitFor(t, 5*time.Second, name+" queued", func() bool { return len(queue(t, rdb, l, "live")) == want })
	}
	k := l.keys("live")
	before, err := rdb.ZRangeWithScores(ctx, k.q, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Wait across several waiter timeouts, checking the queue throughout.
	for end := time.Now().Add(5 * l.opt.WaiterTimeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		now, err := rdb.ZRangeWithScores(ctx, k.q, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(now) != 2 || now[0] != before[0] || now[1] != before[1] {
			t.Fatalf("queue changed while both waiters were alive: %v, was %v", now, before)
		}
	}
	mustUnlock(t, holder)
	wg.Wait()
	if len(order) != 2 || order[0] != "first" || order[1] != "second" {
		t.Fatalf("grant order %v, want [first second]", order)
	}
}

// Renewal keeps a lock alive across many leases and stops exactly at Unlock:
// no orphan key is kept alive afterwards.
func TestRenewalKeepsLockAndStopsAtUnlock(t *testing.T) {
	rdb := testenv.Redis(t)
	lease := 150 * time.Millisecond
	l := newTestLocker(t, rdb, &Options{LeaseTTL: lease})
	ctx := testCtx(t)
	lk := mustLock(t, l, "renew")
	deadline := time.Now().Add(5 * lease)
	for time.Now().Before(deadline) {
		time.Sleep(lease / 5)
		if lk.Err() != nil {
			t.Fatalf("lock lost while renewed: %v", lk.Err())
		}
		if n := rdb.Exists(ctx, lk.k.lock).Val(); n != 1 {
			t.Fatal("lock key expired although renewed")
		}
	}
	mustUnlock(t, lk)
	for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 5) {
		if n := rdb.Exists(ctx, lk.k.lock).Val(); n != 0 {
			t.Fatal("lock key present after Unlock")
		}
	}
}

// A renewal that finds the lock gone closes Done and reports ErrLost, through
// Err and OnLost.
func TestLeaseLossReported(t *testing.T) {
	rdb := testenv.Redis(t)
	hooked := make(chan error, 1)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 300 * time.Millisecond,
		OnLost: func(key string, token uint64, err error) { hooked <- err }})
	ctx := testCtx(t)
	lk := mustLock(t, l, "loss")
	rdb.Del(ctx, lk.k.lock) // e.g. evicted, or expired during a long pause
	select {
	case <-lk.Done():
	case <-time.After(10 * l.opt.LeaseTTL):
		t.Fatal("Done not closed after the lock vanished")
	}
	if !errors.Is(lk.Err(), ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", lk.Err())
	}
	if err := <-hooked; !errors.Is(err, ErrLost) {
		t.Fatalf("OnLost got %v, want ErrLost", err)
	}
	if err := lk.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock after loss: %v, want ErrNotHeld", err)
	}
}

// When Redis cannot be reached for longer than the lease, the holder is told
// at the lease end, without waiting for Redis to answer.
func TestRedisUnreachableLosesLockAtLeaseEnd(t *testing.T) {
	srv := testenv.RedisServer(t)
	rdb := srv.Client()
	lease := 400 * time.Millisecond
	l := newTestLocker(t, rdb, &Options{Prefix: "rf", LeaseTTL: lease})
	lk := mustLock(t, l, "unreachable")
	acquired := time.Now()
	srv.Pause()
	defer srv.Resume()
	select {
	case <-lk.Done():
	case <-time.After(10 * lease):
		t.Fatal("Done not closed while Redis was unreachable past the lease")
	}
	if el := time.Since(acquired); el < lease/2 {
		t.Fatalf("lost after %v, before any renewal could have failed", el)
	}
	if !errors.Is(lk.Err(), ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", lk.Err())
	}
	srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lk.Unlock(ctx)
}

// countRenewals counts the renewal script calls of a client and the locks
// they carried.
type countRenewals struct {
	passHooks
	calls, locks atomic.Int64
}

func (h *countRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 2 && args[1] == scriptRenew.Hash() {
			h.calls.Add(1)
			if n, ok := args[2].(int); ok {
				h.locks.Add(int64(n))
			}
		}
		return next(ctx, cmd)
	}
}

// All locks of a Locker are renewed together, one script call per round, not
// one call (or goroutine) per lock.
func TestRenewalIsBatched(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &countRenewals{}
	rdb.AddHook(hook)
	lease := 300 * time.Millisecond
	l := newTestLocker(t, rdb, &Options{LeaseTTL: lease})
	const n = 10
	var held []*Lock
	for i := range n {
		held = append(held, mustLock(t, l, "batch-"+strconv.Itoa(i)))
		time.Sleep(lease / 50) // acquired at different moments
	}
	time.Sleep(4 * lease)
	for _, lk := range held {
		if lk.Err() != nil {
			t.Fatalf("%s lost: %v", lk.Key(), lk.Err())
		}
		mustUnlock(t, lk)
	}
	calls, locks := hook.calls.Load(), hook.locks.Load()
	// About 4 leases x 3 rounds; renewing each lock on its own would take n
	// times as many calls.
	if calls == 0 || calls > 20 || locks < 4*n {
		t.Fatalf("%d renewal calls carrying %d locks for %d locks over %v", calls, locks, n, 4*lease)
	}
	t.Logf("%d renewal calls carried %d lock renewals", calls, locks)
}

// When the shared subscription connection drops, a hand-off published
// meanwhile is found by the waiter's re-check, and the subscription comes
// back for later hand-offs.
func TestSubscriptionLossRecovered(t *testing.T) {
	srv := testenv.RedisServer(t)
	rdb := srv.Client()
	admin := srv.Client()
	l := newTestLocker(t, rdb, &Options{Prefix: "rf", WaiterTimeout: 3 * time.Second, RecheckInterval: 300 * time.Millisecond})
	ctx := testCtx(t)
	ch := l.waitChannel(l.keys("drop"))
	holder := mustLock(t, l, "drop")
	for round := range 3 {
		res := lockAsync(l, ctx, "drop")
		waitFor(t, 5*time.Second, "waiter subscribed", func() bool { return admin.PubSubNumSub(ctx, ch).Val()[ch] == 1 })
		if round == 1 {
			if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
				t.Fatal(err)
			}
		}
		mustUnlock(t, holder)
		select {
		case o := <-res:
			if o.err != nil {
				t.Fatalf("round %d: %v", round, o.err)
			}
			holder = o.lk
		case <-time.After(10 * l.opt.RecheckInterval):
			t.Fatalf("round %d: waiter not served after the subscription dropped", round)
		}
	}
	mustUnlock(t, holder)
}
