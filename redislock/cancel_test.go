package redislock

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// lockAsync starts l.Lock(ctx, key) and returns where its outcome arrives.
func lockAsync(l *Locker, ctx context.Context, key string) <-chan lockOutcome {
	out := make(chan lockOutcome, 1)
	go func() {
		lk, err := l.Lock(ctx, key)
		out <- lockOutcome{lk, err}
	}()
	return out
}

type lockOutcome struct {
	lk  *Lock
	err error
}

func TestCancelAndDeadlineLeaveTheQueue(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	holder := mustLock(t, l, "cancel")

	cctx, cancel := context.WithCancel(context.Background())
	res := lockAsync(l, cctx, "cancel")
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, "cancel")) == 1 })
	cancel()
	out := <-res
	if !errors.Is(out.err, ErrNotAcquired) || !errors.Is(out.err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want ErrNotAcquired and context.Canceled", out.err)
	}
	if q := queue(t, rdb, l, "cancel"); len(q) != 0 {
		t.Fatalf("cancelled waiter still queued: %v", q)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer dcancel()
	_, err := l.Lock(dctx, "cancel")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past deadline: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}
	if q := queue(t, rdb, l, "cancel"); len(q) != 0 {
		t.Fatalf("timed-out waiter still queued: %v", q)
	}
	if n := rdb.Exists(context.Background(), l.keys("cancel").w).Val(); n != 0 {
		t.Fatal("heartbeat hash left behind")
	}
	mustUnlock(t, holder)
	mustUnlock(t, mustLock(t, l, "cancel"))
}

// A grant that reaches a waiter whose context has just ended is passed on to
// the next waiter, not kept by nobody until its lease ends.
func TestGrantRacingCancelIsPassedOn(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{WaiterTimeout: 10 * time.Second})
	ctx := testCtx(t)
	holder := mustLock(t, l, "race")
	cctx, cancel := context.WithCancel(ctx)
	first := lockAsync(l, cctx, "race")
	waitFor(t, 5*time.Second, "first waiter queued", func() bool { return len(queue(t, rdb, l, "race")) == 1 })
	second := lockAsync(l, ctx, "race")
	waitFor(t, 5*time.Second, "second waiter queued", func() bool { return len(queue(t, rdb, l, "race")) == 2 })
	// Hand the lock to the first waiter without telling it (its message is
	// still on the way), then cancel it: the grant and the cancel race.
	l.renew.remove(holder)
	k := holder.k
	k.ch += ":elsewhere"
	if n, err := scriptUnlock.Run(ctx, rdb, k.all(), holder.id, 60000, "PUBLISH").Int64(); err != nil || n != 1 {
		t.Fatalf("unlock: %d %v", n, err)
	}
	cancel()
	out := <-first
	if !errors.Is(out.err, ErrNotAcquired) || !errors.Is(out.err, context.Canceled) {
		t.Fatalf("cancelled waiter: lock %v, err %v", out.lk, out.err)
	}
	select {
	case o := <-second:
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.lk.Token() <= holder.Token() {
			t.Fatalf("token %d not above %d", o.lk.Token(), holder.Token())
		}
		mustUnlock(t, o.lk)
	case <-time.After(l.opt.RecheckInterval / 2):
		t.Fatal("the grant to the cancelled waiter was not passed on at once")
	}
}

// failFirstAcquire makes the first acquire request of a client reach Redis
// and then fail as if the connection dropped before the reply.
type failFirstAcquire struct{ failed atomic.Bool }

func (h *failFirstAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirstAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failFirstAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 1 && args[1] == scriptAcquire.Hash() && h.failed.CompareAndSwap(false, true) {
			return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
		}
		return err
	}
}

// A transport error after the enqueue applied still takes the caller out of
// the queue, so nobody waits behind a ghost.
func TestTransportErrorLeavesQueue(t *testing.T) {
	admin := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.Prefix(t)
	other := newTestLocker(t, admin, &Options{Prefix: prefix})
	holder := mustLock(t, other, "transport")
	// Load the script first, so that the failing request is the enqueue.
	if err := scriptAcquire.Load(context.Background(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(&failFirstAcquire{})
	l := newTestLocker(t, rdb, &Options{Prefix: prefix})
	_, err := l.Lock(testCtx(t), "transport")
	var opErr *net.OpError
	if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &opErr) {
		t.Fatalf("Lock with a transport error: %v, want ErrNotAcquired and the net error", err)
	}
	if q := queue(t, admin, other, "transport"); len(q) != 0 {
		t.Fatalf("entry left in the queue after a transport error: %v", q)
	}
	mustUnlock(t, holder)
}

// Close wakes waiting Lock calls (ErrClosed, queue left) and releases held
// locks to the next waiter.
func TestCloseWakesWaitersAndReleases(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	l := New(testenv.Redis(t), &Options{Prefix: prefix})
	other := newTestLocker(t, rdb, &Options{Prefix: prefix})
	ctx := testCtx(t)
	held := mustLock(t, l, "held")
	blocker := mustLock(t, other, "blocked")
	waiting := lockAsync(l, ctx, "blocked")
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, other, "blocked")) == 1 })
	next := lockAsync(other, ctx, "held")
	waitFor(t, 5*time.Second, "other waiter queued", func() bool { return len(queue(t, rdb, other, "held")) == 1 })

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	out := <-waiting
	if !errors.Is(out.err, ErrClosed) || !errors.Is(out.err, ErrNotAcquired) {
		t.Fatalf("waiter at Close: %v, want ErrClosed and ErrNotAcquired", out.err)
	}
	if q := queue(t, rdb, other, "blocked"); len(q) != 0 {
		t.Fatalf("closed Locker's waiter still queued: %v", q)
	}
	select {
	case <-held.Done():
	default:
		t.Fatal("Done of a held lock not closed by Close")
	}
	if !errors.Is(held.Err(), ErrLost) || !errors.Is(held.Err(), ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrLost and ErrClosed", held.Err())
	}
	if err := held.Unlock(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Unlock after Close: %v, want ErrClosed", err)
	}
	o := <-next
	if o.err != nil || o.lk.Token() <= held.Token() {
		t.Fatalf("lock released by Close not passed on: %v", o.err)
	}
	mustUnlock(t, o.lk)
	mustUnlock(t, blocker)
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
