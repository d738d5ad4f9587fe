package redislock

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// leaseLeft returns the lease Redis shows for key's lock.
func leaseLeft(t testing.TB, rdb redis.UniversalClient, l *Locker, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(testCtx(t), l.keys(key).lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWithLeaseIsTheLeaseInRedis(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 30 * time.Second})
	for _, tc := range []struct {
		name string
		try  bool
		d    time.Duration
	}{{"Lock", false, 2 * time.Second}, {"TryLock", true, 700 * time.Millisecond}, {"longer", false, time.Minute}} {
		t.Run(tc.name, func(t *testing.T) {
			var lk *Lock
			var err error
			if tc.try {
				lk, err = l.TryLock(testCtx(t), tc.name, WithLease(tc.d))
			} else {
				lk, err = l.Lock(testCtx(t), tc.name, WithLease(tc.d))
			}
			if err != nil {
				t.Fatal(err)
			}
			defer mustUnlock(t, lk)
			if got := leaseLeft(t, rdb, l, tc.name); got > tc.d || got < tc.d-500*time.Millisecond {
				t.Fatalf("PTTL %v, want about %v", got, tc.d)
			}
		})
	}
}

// A short lease is renewed like a default one: the lock outlives it many
// times over while its holder is alive.
func TestWithLeaseIsRenewed(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	d := 150 * time.Millisecond
	lk := mustLock(t, l, "renewed", WithLease(d))
	time.Sleep(5 * d) // what is tested is the passing of time
	select {
	case <-lk.Done():
		t.Fatalf("lock lost: %v", lk.Err())
	default:
	}
	if got := leaseLeft(t, rdb, l, "renewed"); got <= 0 || got > d {
		t.Fatalf("PTTL %v after %v, want within (0, %v]", got, 5*d, d)
	}
	mustUnlock(t, lk)
}

// A lock handed to a waiter gets the waiter's lease, not its last holder's:
// first the hand-off lease (the shorter of the lease and WaiterTimeout), then,
// once renewed, the waiter's full lease.
func TestWithLeaseHandOffGetsTheWaitersLease(t *testing.T) {
	rdb := testenv.Redis(t)
	opt := &Options{LeaseTTL: 30 * time.Second, WaiterTimeout: 900 * time.Millisecond, RecheckInterval: 300 * time.Millisecond}
	l := newTestLocker(t, rdb, opt)
	for _, tc := range []struct {
		name           string
		lease, handoff time.Duration
	}{{"shorter", 400 * time.Millisecond, 400 * time.Millisecond}, {"longer", 20 * time.Second, 900 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "handoff-" + tc.name
			holder := mustLock(t, l, key, WithLease(10*time.Second))
			res := make(chan lockOutcome, 1)
			go func() {
				lk, err := l.Lock(testCtx(t), key, WithLease(tc.lease))
				res <- lockOutcome{lk, err}
			}()
			waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, key)) == 1 })
			mustUnlock(t, holder)
			out := <-res
			if out.err != nil {
				t.Fatal(out.err)
			}
			defer mustUnlock(t, out.lk)
			if got := leaseLeft(t, rdb, l, key); got <= 0 || got > tc.handoff {
				t.Fatalf("PTTL %v after the hand-off, want within (0, %v]", got, tc.handoff)
			}
			// Renewed to the waiter's own lease before the hand-off lease ends.
			waitFor(t, 2*tc.handoff, "renewal", func() bool {
				return leaseLeft(t, rdb, l, key) > tc.lease-tc.lease/3-50*time.Millisecond
			})
			time.Sleep(2 * tc.handoff)
			if err := out.lk.Err(); err != nil {
				t.Fatalf("lock lost after the hand-off: %v", err)
			}
			if got := leaseLeft(t, rdb, l, key); got <= 0 || got > tc.lease {
				t.Fatalf("PTTL %v, want within (0, %v]", got, tc.lease)
			}
		})
	}
}

// A reentrant acquisition with a shorter lease does not shorten the lock's
// lease under the acquisition that holds it longer, whichever came first:
// the short one renews every 20ms to its own 60ms, and must not cut the 10s
// lease.
func TestWithLeaseReentryNeverShortens(t *testing.T) {
	for _, shortFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("shortFirst=%v", shortFirst), func(t *testing.T) {
			rdb := testenv.Redis(t)
			l := newTestLocker(t, rdb, nil)
			leases := []time.Duration{10 * time.Second, 60 * time.Millisecond}
			if shortFirst {
				leases[0], leases[1] = leases[1], leases[0]
			}
			var held []*Lock
			for _, d := range leases {
				held = append(held, mustLock(t, l, "reentry", WithOwner("job"), WithLease(d)))
			}
			time.Sleep(300 * time.Millisecond) // several renewals of the short one
			if got := leaseLeft(t, rdb, l, "reentry"); got < 9*time.Second {
				t.Fatalf("PTTL %v after renewals of the 60ms acquisition, want the 10s lease kept", got)
			}
			for _, lk := range held {
				mustUnlock(t, lk)
			}
		})
	}
}

func TestWithLeaseInvalid(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{TokenTTL: time.Hour})
	k := l.keys("invalid")
	for _, d := range []time.Duration{0, -time.Second, 29 * time.Millisecond, time.Hour + time.Millisecond} {
		for _, try := range []bool{false, true} {
			var err error
			if try {
				_, err = l.TryLock(testCtx(t), "invalid", WithLease(d))
			} else {
				_, err = l.Lock(testCtx(t), "invalid", WithLease(d))
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("WithLease(%v), try %v: %v, want ErrInvalidOptions", d, try, err)
			}
		}
	}
	if n := rdb.Exists(testCtx(t), k.all()...).Val(); n != 0 {
		t.Fatalf("%d keys written for invalid leases", n)
	}
}
