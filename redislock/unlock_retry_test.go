package redislock

import (
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
	if n := rdb.StrLen(ctx, a.k.token).Val(); n > 8192+64 {
		t.Fatalf("token key holds %d bytes after 528 releases", n)
	}
}

// Released ids are forgotten once they are older than the lease (twice the
// lease at most), so a key used now and then keeps only a few of them.
func TestReleasedIDsExpireWithTheLease(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 250 * time.Millisecond})
	ctx := testCtx(t)
	k := l.keys("slow")
	for range 20 {
		mustUnlock(t, mustLock(t, l, "slow"))
	}
	first := rdb.StrLen(ctx, k.token).Val()
	time.Sleep(3 * l.opt.LeaseTTL) // what is tested is the passing of time
	// As many releases again: kept, the old ones would double the record.
	for range 20 {
		mustUnlock(t, mustLock(t, l, "slow"))
	}
	if n := rdb.StrLen(ctx, k.token).Val(); n > first+first/4 {
		t.Fatalf("token key holds %d bytes (%d after the first releases), want the old ones gone: %q",
			n, first, rdb.Get(ctx, k.token).Val())
	}
}
