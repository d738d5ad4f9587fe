package redislock

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// A floor of 2^64-1 leaves no token to mint: it is refused and nothing is
// written, so the key stays usable.
func TestRaiseTokenFloorWithoutRoomIsRefused(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	k := l.keys("full")
	err := l.RaiseTokenFloor(ctx, "full", math.MaxUint64)
	if !errors.Is(err, ErrTokenOverflow) {
		t.Fatalf("RaiseTokenFloor(MaxUint64) = %v, want ErrTokenOverflow", err)
	}
	if n := rdb.Exists(ctx, k.token).Val(); n != 0 {
		t.Fatalf("refused floor wrote the token key: %q", rdb.Get(ctx, k.token).Val())
	}
	lk := mustLock(t, l, "full")
	mustUnlock(t, lk)
}

// The last token is 2^64-1; after it every acquisition fails with
// ErrTokenOverflow without writing anything (the token key keeps its TTL, so
// the key becomes usable again once it expires), while the holder's owner can
// still reenter. A value past 2^64-1 stored by an older version is refused
// the same way.
func TestMintingStopsAtMaxToken(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	other := newTestLocker(t, rdb, &Options{Prefix: l.opt.Prefix})
	ctx := testCtx(t)
	k := l.keys("edge")
	if err := l.RaiseTokenFloor(ctx, "edge", math.MaxUint64-1); err != nil {
		t.Fatal(err)
	}
	last := mustLock(t, l, "edge", WithOwner("o"))
	if last.Token() != math.MaxUint64 {
		t.Fatalf("token after floor 2^64-2 = %d, want 2^64-1", last.Token())
	}
	again := mustLock(t, l, "edge", WithOwner("o"))
	if again.Token() != last.Token() {
		t.Fatalf("reentry token %d, want %d", again.Token(), last.Token())
	}
	mustUnlock(t, again)
	mustUnlock(t, last)

	const ttl = 100 * time.Second
	if !rdb.PExpire(ctx, k.token, ttl).Val() {
		t.Fatal("token key missing")
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrTokenOverflow) || !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("%s: %v, want ErrTokenOverflow and ErrNotAcquired", what, err)
		}
	}
	_, err := other.TryLock(ctx, "edge")
	check("TryLock", err)
	_, err = other.Lock(ctx, "edge")
	check("Lock", err)
	if v := rdb.Get(ctx, k.token).Val(); !strings.HasPrefix(v, "18446744073709551615") {
		t.Fatalf("stored token changed to %q", v)
	}
	if pttl := rdb.PTTL(ctx, k.token).Val(); pttl > ttl || pttl <= 0 {
		t.Fatalf("failed acquisitions refreshed the token key: TTL %v", pttl)
	}
	if n := rdb.Exists(ctx, k.lock, k.q, k.w).Val(); n != 0 {
		t.Fatalf("failed acquisitions left %d keys behind", n)
	}

	// A value already past the range, as an earlier version stored it.
	rdb.Set(ctx, k.token, "18446744073709551616", time.Minute)
	_, err = other.Lock(ctx, "edge")
	check("Lock after an out-of-range stored token", err)
}

// A waiter whose turn comes when no token is left is not left waiting: its
// re-check reports ErrTokenOverflow and takes it out of the queue.
func TestWaiterGivenUpWhenTokensRunOut(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{WaiterTimeout: 2 * time.Second, RecheckInterval: 50 * time.Millisecond})
	ctx := testCtx(t)
	if err := l.RaiseTokenFloor(ctx, "edge", math.MaxUint64-1); err != nil {
		t.Fatal(err)
	}
	holder := mustLock(t, l, "edge")
	waited := make(chan error, 1)
	go func() {
		lk, err := l.Lock(ctx, "edge")
		if err == nil {
			mustUnlock(t, lk)
		}
		waited <- err
	}()
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, "edge")) == 1 })
	mustUnlock(t, holder)
	select {
	case err := <-waited:
		if !errors.Is(err, ErrTokenOverflow) || !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("waiter: %v, want ErrTokenOverflow and ErrNotAcquired", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not told that no token is left")
	}
	waitFor(t, 5*time.Second, "queue emptied", func() bool { return len(queue(t, rdb, l, "edge")) == 0 })
	if n := rdb.Exists(context.Background(), holder.k.lock).Val(); n != 0 {
		t.Fatal("the lock is held by nobody's token")
	}
}
