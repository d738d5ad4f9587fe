package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// A lock handed over late in the waiter's re-check cycle and held briefly is
// never renewed: its first renewal is scheduled off the hand-off lease
// (WaiterTimeout/2 before the lower bound of its end), not at once.
func TestBriefHandOffIsNotRenewed(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &countRenewals{}
	rdb.AddHook(hook)
	prefix := testenv.Prefix(t)
	opt := &Options{Prefix: prefix, WaiterTimeout: 3 * time.Second, RecheckInterval: 1500 * time.Millisecond}
	l := newTestLocker(t, rdb, opt)
	other := newTestLocker(t, testenv.Redis(t), opt)
	ctx := testCtx(t)
	for range 2 {
		holder := mustLock(t, other, "brief")
		res := lockAsync(l, ctx, "brief")
		waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, "brief")) == 1 })
		// Hand over after the waiter's last request by more than a third of
		// the hand-off lease, but before its next re-check.
		time.Sleep(1200 * time.Millisecond)
		mustUnlock(t, holder)
		out := <-res
		if out.err != nil {
			t.Fatal(out.err)
		}
		time.Sleep(20 * time.Millisecond) // the critical section
		mustUnlock(t, out.lk)
	}
	if n := hook.calls.Load(); n != 0 {
		t.Fatalf("%d renewal calls for two brief hand-offs, want 0", n)
	}
}

// A handed-over lock whose hand-off lease cannot be extended (Redis stops
// answering right after the hand-off) is reported lost when the lower bound
// of that lease's end passes, not after a full LeaseTTL or the client's read
// timeout.
func TestHandOffLossReportedBeforeLeaseEnd(t *testing.T) {
	srv := testenv.RedisServer(t)
	w := time.Second
	opt := &Options{Prefix: "rf", WaiterTimeout: w, RecheckInterval: 300 * time.Millisecond}
	l := newTestLocker(t, srv.Client(), opt)
	other := newTestLocker(t, srv.Client(), opt)
	holder := mustLock(t, other, "k")
	res := lockAsync(l, testCtx(t), "k")
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, srv.Client(), l, "k")) == 1 })
	unlockSent := time.Now() // the hand-off, and its lease, start after this
	mustUnlock(t, holder)
	out := <-res
	if out.err != nil {
		t.Fatal(out.err)
	}
	srv.Pause()
	defer srv.Resume()
	select {
	case <-out.lk.Done():
	case <-time.After(5 * w):
		t.Fatal("hand-off lease not extended, yet the lock was not reported lost")
	}
	// The loss is declared at the lower bound of the lease end (the waiter's
	// last request + w, before unlockSent + w), give or take timer latency.
	if el := time.Since(unlockSent); el >= w+100*time.Millisecond || el < w/2 {
		t.Fatalf("loss reported %v after the hand-off; its lease was %v", el, w)
	}
	if !errors.Is(out.lk.Err(), ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", out.lk.Err())
	}
	srv.Resume()
	uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = out.lk.Unlock(uctx)
}
