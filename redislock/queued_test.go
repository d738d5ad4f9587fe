package redislock

import (
	"sync/atomic"
	"testing"

	"github.com/redfence/redfence/internal/testenv"
)

// WithQueued's f runs when Lock queues the caller behind a holder, before
// the grant, and never when the lock is granted at once or by TryLock.
func TestWithQueuedTellsAQueuedLockOnly(t *testing.T) {
	l := newTestLocker(t, testenv.Redis(t), nil)
	var calls atomic.Int32
	queued := WithQueued(func() { calls.Add(1) })

	a := mustLock(t, l, "q", queued)
	if n := calls.Load(); n != 0 {
		t.Fatalf("f called %d times for a lock granted at once", n)
	}
	if _, err := l.TryLock(testCtx(t), "q", queued); err == nil {
		t.Fatal("TryLock of a held lock succeeded")
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("f called %d times by TryLock", n)
	}

	inQueue := make(chan struct{})
	got := make(chan *Lock, 1)
	go func() {
		lk, err := l.Lock(testCtx(t), "q", WithQueued(func() { calls.Add(1); close(inQueue) }))
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	<-inQueue // f ran while a still holds the lock
	select {
	case <-got:
		t.Fatal("the queued Lock returned while the lock was held")
	default:
	}
	mustUnlock(t, a)
	b := <-got
	if n := calls.Load(); n != 1 {
		t.Fatalf("f called %d times for one queued Lock, want 1", n)
	}
	mustUnlock(t, b)
}
