package redislock

import (
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// TryLock by an owner whose queued Lock is handed the lock by that very
// TryLock (the holder's lease ran out) reenters: the owner holds the lock.
func TestTryLockReentersGrantHandedToOwnWaiter(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	ctx := testCtx(t)
	l := newTestLocker(t, rdb, &Options{Prefix: prefix, WaiterTimeout: 30 * time.Second})
	names, _ := KeyNamesFor(prefix, "own")
	rdb.Set(ctx, names.Lock, "1|gone.1|gone", time.Minute)
	queued := make(chan lockOutcome, 1)
	go func() {
		lk, err := l.Lock(ctx, "own", WithOwner("job-7"))
		queued <- lockOutcome{lk, err}
	}()
	waitFor(t, 5*time.Second, "owner's Lock queued", func() bool { return rdb.ZCard(ctx, names.Queue).Val() == 1 })
	rdb.Del(ctx, names.Lock) // the holder's lease ends

	other := newTestLocker(t, rdb, &Options{Prefix: prefix})
	again, err := other.TryLock(ctx, "own", WithOwner("job-7"))
	if err != nil {
		t.Fatalf("TryLock by the owner the lock was just handed to: %v", err)
	}
	o := <-queued
	if o.err != nil {
		t.Fatal(o.err)
	}
	if again.Token() != o.lk.Token() {
		t.Fatalf("reentry token %d, want %d", again.Token(), o.lk.Token())
	}
	mustUnlock(t, again)
	if _, err := other.TryLock(ctx, "own"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("lock free while the owner's Lock still holds it: %v", err)
	}
	mustUnlock(t, o.lk)
	lk, err := other.TryLock(ctx, "own")
	if err != nil {
		t.Fatalf("lock not free after both unlocks: %v", err)
	}
	mustUnlock(t, lk)
}
