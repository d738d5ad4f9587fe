package redislock

import (
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// A release whose reply was lost, retried after many other acquisitions of
// the key were released, is still answered "released" (nil), not ErrNotHeld.
func TestUnlockRetryAfterManyReleases(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	a := mustLock(t, l, "busy")
	// The release applies but its reply is lost.
	l.renew.remove(a)
	n, err := scriptUnlock.Run(ctx, rdb, a.k.all(), a.id, l.args.tokenTTL, l.args.pubcmd, a.lease.ttlArg).Int64()
	if err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	for range 127 {
		mustUnlock(t, mustLock(t, l, "busy"))
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("retried Unlock after 127 other releases: %v, want nil", err)
	}
	// What is remembered stays bounded however many releases there are.
	for range 400 {
		mustUnlock(t, mustLock(t, l, "busy"))
	}
	if n := rdb.LLen(ctx, a.k.rel).Val(); n > 160 {
		t.Fatalf("%d releases remembered after 528", n)
	}
	if v := rdb.Get(ctx, a.k.token).Val(); strings.Contains(v, " ") {
		t.Fatalf("token key %q holds more than the token", v)
	}
}

// Released ids are forgotten once their lease has passed: the record of a key
// used now and then expires.
func TestReleasedIDsExpireWithTheLease(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 250 * time.Millisecond})
	ctx := testCtx(t)
	k := l.keys("slow")
	for range 20 {
		mustUnlock(t, mustLock(t, l, "slow"))
	}
	if n := rdb.LLen(ctx, k.rel).Val(); n != 20 {
		t.Fatalf("%d releases remembered, want 20", n)
	}
	if ttl := rdb.PTTL(ctx, k.rel).Val(); ttl <= 0 || ttl > l.opt.LeaseTTL {
		t.Fatalf("released record TTL %v, want (0, %v]", ttl, l.opt.LeaseTTL)
	}
	time.Sleep(2 * l.opt.LeaseTTL) // what is tested is the passing of time
	if n := rdb.Exists(ctx, k.rel).Val(); n != 0 {
		t.Fatalf("released record still there: %v", rdb.LRange(ctx, k.rel, 0, -1).Val())
	}
}

// A longer lease's release is not forgotten when shorter ones follow it: the
// record lives as long as the longest window in it.
func TestReleasedIDsKeepTheirOwnWindow(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	long := mustLock(t, l, "mixed", WithLease(10*time.Second))
	l.renew.remove(long)
	n, err := scriptUnlock.Run(ctx, rdb, long.k.all(), long.id, l.args.tokenTTL, l.args.pubcmd, long.lease.ttlArg).Int64()
	if err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	for range 100 {
		mustUnlock(t, mustLock(t, l, "mixed", WithLease(40*time.Millisecond)))
	}
	time.Sleep(100 * time.Millisecond) // what is tested is the passing of time
	if ttl := rdb.PTTL(ctx, long.k.rel).Val(); ttl < 9*time.Second {
		t.Fatalf("released record TTL %v, want the longer lease kept", ttl)
	}
	if err := long.Unlock(ctx); err != nil {
		t.Fatalf("retried Unlock within its lease: %v, want nil", err)
	}
}
