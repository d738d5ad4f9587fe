package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// inspect calls Inspect and fails the test on error.
func inspect(t *testing.T, l *Locker, key string) LockInfo {
	t.Helper()
	info, err := Inspect(testCtx(t), l.rdb, l.opt.Prefix, key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return info
}

// A lock nobody ever took reads as free, with no queue, no stored token and
// no problem, and reading it creates nothing.
func TestInspectUnusedKey(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	info := inspect(t, l, "never")
	if info.Holder != nil || len(info.Queue) != 0 || info.StoredToken != 0 || info.StoredTokenTTL != 0 || len(info.Problems) != 0 {
		t.Fatalf("unused key: %+v", info)
	}
	if want, _ := KeyNamesFor(l.opt.Prefix, "never"); info.Key != "never" || info.Names != want {
		t.Fatalf("key %q names %+v, want %+v", info.Key, info.Names, want)
	}
	if d := time.Since(info.ServerTime); d < -time.Minute || d > time.Minute {
		t.Fatalf("server time %v is %v away from the local clock", info.ServerTime, d)
	}
	if keys := keysUnder(t, rdb, l); len(keys) != 0 {
		t.Fatalf("Inspect created %v", keys)
	}
}

// A reentrant holder and waiters queued from several Lockers read back as
// they are: owner, token, both acquisitions and the lease; the waiters in
// FIFO order with their owners, ids and live heartbeats; the stored token.
// After the holder lets go, the head holds and the rest moved up. Keys with
// braces (the digested layout) read the same way.
func TestInspectHolderAndQueue(t *testing.T) {
	for _, key := range []string{"busy", "}odd{key"} {
		t.Run(strings.Trim(key, "{}"), func(t *testing.T) {
			prefix := testenv.Prefix(t)
			opt := &Options{Prefix: prefix, LeaseTTL: 20 * time.Second, WaiterTimeout: 4 * time.Second}
			rdb := testenv.Redis(t)
			holder := newTestLocker(t, rdb, opt)
			ctx := testCtx(t)
			first := mustLock(t, holder, key, WithOwner("alice"))
			again := mustLock(t, holder, key, WithOwner("alice"))

			const n = 3
			granted := make([]<-chan lockOutcome, n)
			for i := range n {
				l := newTestLocker(t, testenv.Redis(t), opt)
				owner := fmt.Sprintf("w%d", i)
				out := make(chan lockOutcome, 1)
				go func() {
					lk, err := l.Lock(ctx, key, WithOwner(owner))
					out <- lockOutcome{lk, err}
				}()
				granted[i] = out
				waitFor(t, 5*time.Second, owner+" queued", func() bool { return len(queue(t, rdb, holder, key)) == i+1 })
			}
			ids := queue(t, rdb, holder, key)

			info := inspect(t, holder, key)
			h := info.Holder
			if h == nil || h.Owner != "alice" || h.Token != first.Token() || len(h.Acquisitions) != 2 {
				t.Fatalf("holder %+v, want alice with token %d and 2 acquisitions", h, first.Token())
			}
			if h.LeaseLeft <= 0 || h.LeaseLeft > opt.LeaseTTL {
				t.Fatalf("lease left %v, want within (0, %v]", h.LeaseLeft, opt.LeaseTTL)
			}
			if info.StoredToken != first.Token() || info.StoredTokenTTL <= 0 {
				t.Fatalf("stored token %d (ttl %v), want %d with a ttl", info.StoredToken, info.StoredTokenTTL, first.Token())
			}
			checkQueue(t, info, []string{"w0", "w1", "w2"}, ids, opt.WaiterTimeout)

			mustUnlock(t, again)
			mustUnlock(t, first)
			o := <-granted[0]
			if o.err != nil {
				t.Fatal(o.err)
			}
			info = inspect(t, holder, key)
			if h := info.Holder; h == nil || h.Owner != "w0" || h.Token != o.lk.Token() || len(h.Acquisitions) != 1 {
				t.Fatalf("after the hand-off: holder %+v, want w0 with token %d", h, o.lk.Token())
			}
			if info.StoredToken != o.lk.Token() {
				t.Fatalf("stored token %d after the hand-off, want %d", info.StoredToken, o.lk.Token())
			}
			checkQueue(t, info, []string{"w1", "w2"}, ids[1:], opt.WaiterTimeout)
			if len(info.Problems) != 0 {
				t.Fatalf("problems in a healthy state: %q", info.Problems)
			}

			mustUnlock(t, o.lk)
			for _, c := range granted[1:] {
				o := <-c
				if o.err != nil {
					t.Fatal(o.err)
				}
				mustUnlock(t, o.lk)
			}
			info = inspect(t, holder, key)
			if info.Holder != nil || len(info.Queue) != 0 || info.StoredToken == 0 {
				t.Fatalf("after everyone left: %+v, want free, no queue, a stored token", info)
			}
		})
	}
}

func checkQueue(t *testing.T, info LockInfo, owners, ids []string, waiterTimeout time.Duration) {
	t.Helper()
	var gotOwners, gotIDs []string
	for i, w := range info.Queue {
		gotOwners, gotIDs = append(gotOwners, w.Owner), append(gotIDs, w.ID)
		if w.Expired || !w.Deadline.After(info.ServerTime) || w.Deadline.Sub(info.ServerTime) > waiterTimeout {
			t.Errorf("waiter %d (%s): deadline %v at server time %v (expired %v), want within %v ahead",
				i, w.Owner, w.Deadline, info.ServerTime, w.Expired, waiterTimeout)
		}
		if w.HandOffLease != waiterTimeout {
			t.Errorf("waiter %d: hand-off lease %v, want %v", i, w.HandOffLease, waiterTimeout)
		}
		if i > 0 && w.Seq <= info.Queue[i-1].Seq {
			t.Errorf("waiter %d: sequence %d not above %d", i, w.Seq, info.Queue[i-1].Seq)
		}
	}
	if !slices.Equal(gotOwners, owners) || !slices.Equal(gotIDs, ids) {
		t.Fatalf("queue owners %v ids %v, want %v %v", gotOwners, gotIDs, owners, ids)
	}
}

// State the scripts never leave behind is reported, not hidden: a malformed
// lock value, a lock without lease, a queued id without heartbeat (expired),
// a heartbeat past its deadline, heartbeats of ids not queued.
func TestInspectReportsOddState(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	k := l.keys("odd")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rdb.Set(ctx, k.lock, "garbage", 0).Err())
	must(rdb.ZAdd(ctx, k.q, redis.Z{Score: 1, Member: "nobeat"}, redis.Z{Score: 2, Member: "late"}).Err())
	must(rdb.HSet(ctx, k.w, "late", "1000:5000:bob", "gone", "99999999999999:5000:x").Err())

	info := inspect(t, l, "odd")
	if info.Holder == nil || info.Holder.Token != 0 || info.Holder.LeaseLeft != -1 {
		t.Fatalf("holder %+v, want a malformed one without lease", info.Holder)
	}
	if len(info.Queue) != 2 || info.Queue[0].ID != "nobeat" || !info.Queue[0].Expired || !info.Queue[0].Deadline.IsZero() {
		t.Fatalf("queue %+v, want nobeat first, expired, without deadline", info.Queue)
	}
	if w := info.Queue[1]; w.ID != "late" || w.Owner != "bob" || !w.Expired || w.Deadline.UnixMilli() != 1000 {
		t.Fatalf("second waiter %+v, want bob, expired at 1000 ms", w)
	}
	all := strings.Join(info.Problems, "\n")
	for _, want := range []string{"malformed lock value", "no lease", "nobeat has no heartbeat", "1 heartbeat entries of ids not in the queue"} {
		if !strings.Contains(all, want) {
			t.Errorf("problems %q lack %q", info.Problems, want)
		}
	}
	// Inspecting repaired nothing: the scripts do that, not Inspect.
	if n := rdb.HLen(ctx, k.w).Val(); n != 2 {
		t.Fatalf("w has %d entries after Inspect, want 2", n)
	}
}

func TestInspectBadInput(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := testCtx(t)
	if _, err := Inspect(ctx, rdb, "", ""); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("empty key: %v, want ErrInvalidKey", err)
	}
	if _, err := Inspect(ctx, rdb, "a{b", "k"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("prefix with a brace: %v, want ErrInvalidOptions", err)
	}
	if _, err := Inspect(ctx, nil, "", "k"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil client: %v, want ErrInvalidOptions", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Inspect(cctx, rdb, "", "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v, want context.Canceled", err)
	}
}

// inspect.lua expands, opens with its header and loads.
func TestInspectScriptLoads(t *testing.T) {
	rdb := testenv.Redis(t)
	src := luaSource("inspect.lua")
	if strings.Contains(src, "--#include") || !strings.HasPrefix(src, "-- inspect.lua: KEYS[") {
		t.Fatal("inspect.lua: include left unexpanded or header not first")
	}
	sha, err := rdb.ScriptLoad(testCtx(t), src).Result()
	if err != nil || sha != scriptInspect.Hash() {
		t.Fatalf("inspect.lua: loaded %s (%v), script digest %s", sha, err, scriptInspect.Hash())
	}
}
