package redislock

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// A holder's grant vanishes from Redis (a failover to a replica that missed
// it) and another holder takes the key. The older holder's renewer, at its
// next renewal, must learn that it lost the lock (Done closes, Err is
// ErrLost, OnLost fires) and must leave the new holder's lease as the new
// holder set it: a longer lease of the older holder must not be written
// over the new holder's, and the new holder keeps the lock.
//
// It catches a renewal that renews whatever lock holds the key (by key, by
// token or by owner rather than by acquisition id), one that extends the
// lease before checking whose it is, and one that reports success for a
// lock that is not its own (the older holder would go on believing it
// holds the key, and the newer holder's lease would outlive its own).
func TestRenewalAfterTakeover(t *testing.T) {
	for _, c := range []struct {
		name       string
		oneLocker  bool          // both holders on one Locker, renewed by one renewer
		olderLease time.Duration // first renewed a third of the way in
		newerLease time.Duration
	}{
		{"two Lockers, longer older lease", false, 3 * time.Second, time.Second},
		{"one Locker, longer older lease", true, 3 * time.Second, time.Second},
		{"one Locker, same lease", true, 1500 * time.Millisecond, 1500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := testenv.Redis(t)
			ctx := testCtx(t)
			lost := make(chan uint64, 1) // token reported by OnLost, called after Done closes
			olderL := newTestLocker(t, rdb, &Options{OnLost: func(_ string, token uint64, _ error) {
				select {
				case lost <- token:
				default:
				}
			}})
			newerL := olderL
			if !c.oneLocker {
				newerL = newTestLocker(t, rdb, &Options{Prefix: olderL.opt.Prefix})
			}
			older := mustLock(t, olderL, "taken", WithLease(c.olderLease))
			k := older.k
			if err := rdb.Del(ctx, k.lock, k.token).Err(); err != nil {
				t.Fatal(err)
			}
			newer, err := newerL.TryLock(ctx, "taken", WithLease(c.newerLease))
			if err != nil {
				t.Fatalf("TryLock after the grant vanished: %v", err)
			}
			defer mustUnlock(t, newer)
			if newer.Token() == older.Token() {
				t.Fatalf("both holders have token %d", newer.Token())
			}
			select {
			case <-older.Done():
			case <-time.After(c.olderLease + 2*time.Second):
				t.Fatalf("the older holder did not learn within its lease (%v) that its lock was taken over: Err %v", c.olderLease, older.Err())
			}
			// The older holder's renewal has just run: the key must still be
			// the newer holder's, on the newer holder's lease.
			pttl := rdb.PTTL(ctx, k.lock).Val()
			v := rdb.Get(ctx, k.lock).Val()
			if !errors.Is(older.Err(), ErrLost) {
				t.Fatalf("older holder's Err = %v, want ErrLost", older.Err())
			}
			select {
			case tok := <-lost:
				if tok != older.Token() {
					t.Fatalf("OnLost reported token %d, want the older holder's %d", tok, older.Token())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("OnLost not called within 5s of Done")
			}
			if pttl > c.newerLease {
				t.Fatalf("the new holder's lease is %v after the older holder's renewal, above its own %v", pttl, c.newerLease)
			}
			if tok, ids, _ := parseLockValue(v); tok != newer.Token() || ids != newer.id {
				t.Fatalf("lock value %q after the older holder's renewal, want token %d and acquisition %s", v, newer.Token(), newer.id)
			}
			if newer.Err() != nil {
				t.Fatalf("newer holder's Err = %v, want nil", newer.Err())
			}
			if _, err := newerL.TryLock(ctx, "taken"); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("TryLock by a third caller = %v, want ErrNotAcquired", err)
			}
		})
	}
}

// parseLockValue splits a lock value "<token>|<ids>|<owner>".
func parseLockValue(v string) (token uint64, ids, owner string) {
	parts := strings.SplitN(v, "|", 3)
	if len(parts) != 3 {
		return 0, "", ""
	}
	token, _ = strconv.ParseUint(parts[0], 10, 64)
	return token, parts[1], parts[2]
}
