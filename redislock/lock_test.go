package redislock

import (
	"slices"
	"sort"
	"strings"
	"time"

	"context"
	"errors"
	"github.com/redis/go-redis/v9"
	"testing"

	"github.com/redfence/redfence/internal/testenv"
)

func TestLockUnlockBasic(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	lk := mustLock(t, l, "basic")
	if lk.Key() != "basic" || lk.Token() == 0 || lk.Owner() == "" || lk.Err() != nil {
		t.Fatalf("lock = key %q token %d owner %q err %v", lk.Key(), lk.Token(), lk.Owner(), lk.Err())
	}
	if _, err := l.TryLock(testCtx(t), "basic"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock on held lock: %v, want ErrNotAcquired", err)
	}
	mustUnlock(t, lk)
	select {
	case <-lk.Done():
	default:
		t.Fatal("Done not closed after Unlock")
	}
	if !errors.Is(lk.Err(), ErrNotHeld) {
		t.Fatalf("Err after Unlock = %v, want ErrNotHeld", lk.Err())
	}
	lk2, err := l.TryLock(context.Background(), "basic")
	if err != nil {
		t.Fatalf("TryLock on free lock: %v", err)
	}
	if lk2.Token() <= lk.Token() {
		t.Fatalf("token did not grow: %d then %d", lk.Token(), lk2.Token())
	}
	mustUnlock(t, lk2)
}

// keysUnder returns every Redis key under the Locker's prefix.
func keysUnder(t testing.TB, rdb redis.UniversalClient, l *Locker) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), l.opt.Prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

func TestReentrancyByOwner(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	a1 := mustLock(t, l, "re", WithOwner("job-1"))
	a2, err := l.TryLock(testCtx(t), "re", WithOwner("job-1"))
	if err != nil {
		t.Fatalf("reentrant TryLock: %v", err)
	}
	a3 := mustLock(t, l, "re", WithOwner("job-1"))
	if a1.Token() != a2.Token() || a2.Token() != a3.Token() {
		t.Fatalf("reentrant tokens differ: %d %d %d", a1.Token(), a2.Token(), a3.Token())
	}
	v := rdb.Get(context.Background(), l.keys("re").lock).Val()
	if _, ids, _ := strings.Cut(v, "|"); len(strings.Fields(strings.Split(ids, "|")[0])) != 3 {
		t.Fatalf("lock %q does not hold 3 acquisitions", v)
	}
	if _, err := l.TryLock(testCtx(t), "re", WithOwner("job-2")); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("other owner TryLock: %v, want ErrNotAcquired", err)
	}
	for i, lk := range []*Lock{a2, a1} {
		mustUnlock(t, lk)
		if _, err := l.TryLock(testCtx(t), "re", WithOwner("job-2")); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("after releasing %d of 3 acquisitions, another owner got the lock: %v", i+1, err)
		}
	}
	mustUnlock(t, a3)
	b := mustLock(t, l, "re", WithOwner("job-2"))
	if b.Token() <= a1.Token() {
		t.Fatalf("token after reentrant holder left: %d, not above %d", b.Token(), a1.Token())
	}
	mustUnlock(t, b)
}

func TestOnlyOwnerCanUnlockOrRenew(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	lk := mustLock(t, l, "own", WithOwner("alice"))
	ctx := testCtx(t)
	// Another acquisition id of another owner, as another process would have.
	forged := &Lock{l: l, key: lk.key, k: lk.k, id: "intruder.1", owner: "mallory", token: lk.token, lease: lk.lease, done: make(chan struct{})}
	if err := forged.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("unlock by non-owner: %v, want ErrNotHeld", err)
	}
	held, err := scriptRenew.Run(ctx, rdb, []string{lk.k.lock}, 60000, "intruder.1").Int64Slice()
	if err != nil || held[0] != 0 {
		t.Fatalf("renew by non-owner: %v %v, want [0]", held, err)
	}
	if pttl := rdb.PTTL(ctx, lk.k.lock).Val(); pttl > l.opt.LeaseTTL {
		t.Fatalf("non-owner renewal changed the lease to %v", pttl)
	}
	if _, err := l.TryLock(ctx, "own"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("lock released by a non-owner: TryLock = %v", err)
	}
	mustUnlock(t, lk)
}

func TestUnlockIdempotentUnderRetry(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	a := mustLock(t, l, "retry")
	got := make(chan *Lock, 2)
	go func() {
		lk, err := l.Lock(ctx, "retry")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, "retry")) == 1 })
	mustUnlock(t, a)
	b := <-got
	// The release applied, but suppose its reply was lost: the client sends
	// the same request again while the lock already belongs to b.
	n, err := scriptUnlock.Run(ctx, rdb, a.k.all(), a.id, l.ms(l.opt.TokenTTL), l.pubcmd).Int64()
	if err != nil || n != 2 {
		t.Fatalf("retried unlock = %d, %v; want 2 (released by an earlier call)", n, err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock: %v, want nil", err)
	}
	if b.Err() != nil {
		t.Fatalf("retried unlock disturbed the next holder: %v", b.Err())
	}
	if _, err := l.TryLock(ctx, "retry"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("retried unlock released the next holder's lock: %v", err)
	}
	mustUnlock(t, b)

	// A lock that was really lost is reported as such.
	c := mustLock(t, l, "retry")
	rdb.Del(ctx, c.k.lock)
	if err := c.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of a lost lock: %v, want ErrNotHeld", err)
	}
}

func TestBadInputTouchesNothing(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	for _, key := range []string{"", strings.Repeat("k", MaxKeyLen+1), "bad\xffutf8", strings.Repeat("é", 96)} {
		if _, err := l.Lock(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Lock(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, err := l.TryLock(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("TryLock(%q): %v, want ErrInvalidKey", key, err)
		}
		if err := l.RaiseTokenFloor(ctx, key, 7); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("RaiseTokenFloor(%q): %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := l.Lock(ctx, "k", WithOwner("")); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("empty owner: %v, want ErrInvalidOptions", err)
	}
	if keys := keysUnder(t, rdb, l); len(keys) != 0 {
		t.Fatalf("invalid calls wrote %v", keys)
	}
	for _, key := range []string{strings.Repeat("k", MaxKeyLen), "é", "}{", "{a}"} {
		mustUnlock(t, mustLock(t, l, key))
	}

	prefix := testenv.Prefix(t)
	for name, o := range map[string]*Options{
		"negative LeaseTTL":        {Prefix: prefix, LeaseTTL: -time.Second},
		"tiny LeaseTTL":            {Prefix: prefix, LeaseTTL: time.Millisecond},
		"negative WaiterTimeout":   {Prefix: prefix, WaiterTimeout: -1},
		"negative RecheckInterval": {Prefix: prefix, RecheckInterval: -1},
		"recheck too slow":         {Prefix: prefix, WaiterTimeout: time.Second, RecheckInterval: 600 * time.Millisecond},
		"negative TokenTTL":        {Prefix: prefix, TokenTTL: -1},
		"TokenTTL below lease":     {Prefix: prefix, TokenTTL: time.Second},
		"negative MinReplicas":     {Prefix: prefix, MinReplicas: -1},
		"negative ReplicaTimeout":  {Prefix: prefix, ReplicaTimeout: -1},
		"brace in prefix":          {Prefix: "a{b"},
	} {
		bad := New(rdb, o)
		_, e1 := bad.Lock(ctx, "k")
		_, e2 := bad.TryLock(ctx, "k")
		e3 := bad.RaiseTokenFloor(ctx, "k", 1)
		e4 := bad.Close()
		for _, err := range []error{e1, e2, e3, e4} {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
			}
		}
	}
	if _, err := New(nil, nil).Lock(ctx, "k"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil client: %v, want ErrInvalidOptions", err)
	}
	if n, _ := rdb.Keys(ctx, prefix+"*").Result(); len(n) != 0 {
		t.Fatalf("invalid Lockers wrote %v", n)
	}

	closed := newTestLocker(t, rdb, nil)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Lock(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("Lock on closed Locker: %v, want ErrClosed", err)
	}
	if _, err := closed.TryLock(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("TryLock on closed Locker: %v, want ErrClosed", err)
	}
	if err := closed.RaiseTokenFloor(ctx, "k", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("RaiseTokenFloor on closed Locker: %v, want ErrClosed", err)
	}
	if keys := keysUnder(t, rdb, closed); len(keys) != 0 {
		t.Fatalf("closed Locker wrote %v", keys)
	}
}

func TestOptionDefaults(t *testing.T) {
	o, err := (*Options)(nil).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Prefix != "redfence" || o.LeaseTTL != 30*time.Second || o.WaiterTimeout != 5*time.Second ||
		o.RecheckInterval != 5*time.Second/3 || o.TokenTTL != 720*time.Hour || o.MinReplicas != 0 ||
		o.ReplicaTimeout != time.Second || o.Logger == nil {
		t.Fatalf("defaults: %+v", o)
	}
	o, err = (&Options{LeaseTTL: time.Second}).withDefaults()
	if err != nil || o.WaiterTimeout != time.Second {
		t.Fatalf("WaiterTimeout is not capped at LeaseTTL: %v %v", o.WaiterTimeout, err)
	}
}

// After every path (plain use, hand-off, reentry, cancelled waiter), a free
// lock with no waiters leaves only its token key.
func TestCleanStateLeavesOnlyTokenKey(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	a := mustLock(t, l, "clean", WithOwner("o"))
	b := mustLock(t, l, "clean", WithOwner("o"))
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { _, err := l.Lock(cctx, "clean"); cancelled <- err }()
	next := make(chan *Lock, 1)
	waitFor(t, 5*time.Second, "first waiter queued", func() bool { return len(queue(t, rdb, l, "clean")) == 1 })
	go func() {
		lk, err := l.Lock(ctx, "clean")
		if err != nil {
			t.Error(err)
		}
		next <- lk
	}()
	waitFor(t, 5*time.Second, "two waiters queued", func() bool { return len(queue(t, rdb, l, "clean")) == 2 })
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	mustUnlock(t, a)
	mustUnlock(t, b)
	mustUnlock(t, <-next)
	k := l.keys("clean")
	if got := keysUnder(t, rdb, l); !slices.Equal(got, []string{k.rel, k.token}) {
		t.Fatalf("keys left: %v, want only %s and %s", got, k.rel, k.token)
	}
	if ttl := rdb.PTTL(ctx, k.rel).Val(); ttl <= 0 || ttl > l.opt.LeaseTTL {
		t.Fatalf("released record TTL = %v, want (0, %v]", ttl, l.opt.LeaseTTL)
	}
	if ttl := rdb.PTTL(ctx, k.token).Val(); ttl <= 0 || ttl > l.opt.TokenTTL {
		t.Fatalf("token key TTL = %v, want (0, %v]", ttl, l.opt.TokenTTL)
	}
}

func TestRaiseTokenFloor(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	first := mustLock(t, l, "floor")
	mustUnlock(t, first)
	if err := l.RaiseTokenFloor(ctx, "floor", 5); err != nil {
		t.Fatal(err)
	}
	low := mustLock(t, l, "floor")
	if low.Token() <= first.Token() {
		t.Fatalf("a floor below the stored token lowered it: %d after %d", low.Token(), first.Token())
	}
	mustUnlock(t, low)
	// Above 2^53, where Lua numbers are no longer exact.
	const floor = uint64(1)<<60 + 1
	if err := l.RaiseTokenFloor(ctx, "floor", floor); err != nil {
		t.Fatal(err)
	}
	high := mustLock(t, l, "floor")
	if high.Token() != floor+1 {
		t.Fatalf("token after floor %d = %d, want %d", floor, high.Token(), floor+1)
	}
	mustUnlock(t, high)
	again := mustLock(t, l, "floor")
	if again.Token() != floor+2 {
		t.Fatalf("next token = %d, want %d", again.Token(), floor+2)
	}
	mustUnlock(t, again)
}
