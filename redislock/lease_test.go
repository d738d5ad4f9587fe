package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

func lockPTTL(t *testing.T, l *Locker, key string) time.Duration {
	t.Helper()
	d, err := l.rdb.PTTL(context.Background(), l.keys(key).lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// WithLease is the lease the lock is granted with and renewed to; other
// locks of the Locker keep Options.LeaseTTL.
func TestWithLeaseIsTheLockLease(t *testing.T) {
	l := newTestLocker(t, testenv.Redis(t), &Options{LeaseTTL: 10 * time.Second})
	short := mustLock(t, l, "short", WithLease(600*time.Millisecond))
	defer mustUnlock(t, short)
	long := mustLock(t, l, "long")
	defer mustUnlock(t, long)
	if d := lockPTTL(t, l, "short"); d <= 0 || d > 600*time.Millisecond {
		t.Fatalf("PTTL with WithLease(600ms) = %v", d)
	}
	if d := lockPTTL(t, l, "long"); d < 5*time.Second {
		t.Fatalf("PTTL of the Locker's lease = %v, want about 10s", d)
	}
	// Three leases later the short lock is still held: it was renewed, to
	// its own lease.
	time.Sleep(1800 * time.Millisecond) // what is tested is the passing of time
	select {
	case <-short.Done():
		t.Fatalf("lock with a 600ms lease lost: %v", short.Err())
	default:
	}
	if d := lockPTTL(t, l, "short"); d <= 0 || d > 600*time.Millisecond {
		t.Fatalf("PTTL after renewals = %v, want within (0, 600ms]", d)
	}
}

// A lock handed over to a waiter starts with the hand-off lease and is then
// renewed to the waiter's own lease.
func TestWithLeaseAfterHandOff(t *testing.T) {
	opt := &Options{Prefix: testenv.Prefix(t), LeaseTTL: 2 * time.Second, WaiterTimeout: 200 * time.Millisecond, RecheckInterval: 50 * time.Millisecond}
	rdb := testenv.Redis(t)
	holder := newTestLocker(t, rdb, opt)
	waiter := newTestLocker(t, rdb, opt)
	first := mustLock(t, holder, "k")
	got := make(chan *Lock, 1)
	go func() {
		lk, err := waiter.Lock(testCtx(t), "k", WithLease(6*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	queued := time.Now().Add(5 * time.Second)
	for rdb.ZCard(context.Background(), holder.keys("k").q).Val() != 1 {
		if time.Now().After(queued) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(5 * time.Millisecond) // polling Redis for the queue entry
	}
	mustUnlock(t, first)
	lk := <-got
	if lk == nil {
		t.FailNow()
	}
	defer mustUnlock(t, lk)
	deadline := time.Now().Add(3 * time.Second)
	for lockPTTL(t, waiter, "k") <= opt.LeaseTTL {
		if time.Now().After(deadline) {
			t.Fatalf("PTTL %v 3s after the hand-off, want the waiter's own 6s lease", lockPTTL(t, waiter, "k"))
		}
		time.Sleep(20 * time.Millisecond) // polling Redis for the renewal
	}
}

// Reentrant acquisitions with leases of their own: renewing the shorter one
// never shortens the lock's lease in Redis.
func TestWithLeaseReentryNeverShortens(t *testing.T) {
	l := newTestLocker(t, testenv.Redis(t), nil)
	short := mustLock(t, l, "k", WithOwner("job-1"), WithLease(150*time.Millisecond))
	defer mustUnlock(t, short)
	long := mustLock(t, l, "k", WithOwner("job-1"), WithLease(8*time.Second))
	defer mustUnlock(t, long)
	time.Sleep(600 * time.Millisecond) // several renewals of the short acquisition
	if d := lockPTTL(t, l, "k"); d < 5*time.Second {
		t.Fatalf("PTTL %v after renewals of the 150ms acquisition, want the 8s lease kept", d)
	}
	if short.Err() != nil || long.Err() != nil {
		t.Fatalf("errors: %v, %v", short.Err(), long.Err())
	}
}

func TestWithLeaseBadInput(t *testing.T) {
	l := newTestLocker(t, testenv.Redis(t), &Options{TokenTTL: time.Hour})
	for _, d := range []time.Duration{0, -time.Second, 29 * time.Millisecond, time.Hour + time.Millisecond} {
		if _, err := l.Lock(testCtx(t), "bad", WithLease(d)); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Lock WithLease(%v) = %v, want ErrInvalidOptions", d, err)
		}
		if _, err := l.TryLock(testCtx(t), "bad", WithLease(d)); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("TryLock WithLease(%v) = %v, want ErrInvalidOptions", d, err)
		}
	}
	k := l.keys("bad")
	if n := l.rdb.Exists(context.Background(), k.lock, k.token, k.q).Val(); n != 0 {
		t.Fatalf("%d keys created by refused calls", n)
	}
}
