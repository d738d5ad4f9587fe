package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

func (e *env) locker(opt redislock.Options) *redislock.Locker {
	e.t.Helper()
	opt.Prefix = e.prefix
	l := redislock.New(testenv.Redis(e.t), &opt)
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

// A held lock with waiters from several Lockers, under a prefix of its own:
// inspect -json shows the holder, the waiters in FIFO order with live
// heartbeats, the stored token, and the fence row that guard.Do claimed under
// the namespace named after the prefix; the text output says the same.
func TestInspectHolderQueueAndFence(t *testing.T) {
	e := newEnv(t)
	const key = "sku:42"
	opt := redislock.Options{LeaseTTL: 20 * time.Second, WaiterTimeout: 4 * time.Second}
	holder := e.locker(opt)
	g := guard.New(holder, e.db, nil)
	var claimed uint64
	err := g.Do(testCtx(t), key, func(ctx context.Context, tx *guard.Tx) error {
		claimed = tx.Token()
		return nil
	})
	if err != nil {
		t.Fatalf("guard.Do: %v", err)
	}

	ctx := testCtx(t)
	lk, err := holder.Lock(ctx, key, redislock.WithOwner("alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Unlock(context.Background()) }()
	names, _ := redislock.KeyNamesFor(e.prefix, key)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 3)
	for i := range 3 {
		l := e.locker(opt)
		go func() {
			_, err := l.Lock(waitCtx, key, redislock.WithOwner(fmt.Sprintf("w%d", i)))
			waited <- err
		}()
		// The next waiter starts once this one is queued, so the order is known.
		deadline := time.Now().Add(10 * time.Second)
		for e.rdb.ZCard(ctx, names.Queue).Val() != int64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	defer func() {
		stopWaiting()
		for range 3 {
			if err := <-waited; !errors.Is(err, redislock.ErrNotAcquired) {
				t.Errorf("waiter: %v, want ErrNotAcquired", err)
			}
		}
	}()
	ids := e.rdb.ZRange(ctx, names.Queue, 0, -1).Val()

	var got inspectJSON
	decode(t, e.mustRun("inspect", "-json", "-prefix", e.prefix, key), &got)
	if got.Key != key || got.Prefix != e.prefix || got.RedisKeys.Lock != names.Lock || got.RedisKeys.Waiters != names.Waiters {
		t.Fatalf("key, prefix or names wrong: %+v", got)
	}
	h := got.Holder
	if h == nil || h.Owner != "alice" || h.Token != lk.Token() || len(h.Acquisitions) != 1 ||
		h.LeaseLeftMs <= 0 || h.LeaseLeftMs > opt.LeaseTTL.Milliseconds() {
		t.Fatalf("holder %+v, want alice with token %d and a lease", h, lk.Token())
	}
	var owners, gotIDs []string
	for i, w := range got.Queue {
		owners, gotIDs = append(owners, w.Owner), append(gotIDs, w.ID)
		if w.Position != i+1 || w.Expired || w.HeartbeatDeadline == nil || w.ExpiresInMs <= 0 ||
			w.ExpiresInMs > opt.WaiterTimeout.Milliseconds() || w.HandOffLeaseMs != opt.WaiterTimeout.Milliseconds() {
			t.Errorf("waiter %d: %+v, want a live heartbeat within %v", i, w, opt.WaiterTimeout)
		}
		if w.HeartbeatDeadline != nil && !w.HeartbeatDeadline.After(got.ServerTime) {
			t.Errorf("waiter %d: deadline %v not after server time %v", i, w.HeartbeatDeadline, got.ServerTime)
		}
	}
	if !slices.Equal(owners, []string{"w0", "w1", "w2"}) || !slices.Equal(gotIDs, ids) {
		t.Fatalf("queue owners %v ids %v, want w0 w1 w2 and %v", owners, gotIDs, ids)
	}
	if got.StoredToken != lk.Token() || got.StoredTokenTTLMs <= 0 {
		t.Fatalf("stored token %d (ttl %d ms), want %d", got.StoredToken, got.StoredTokenTTLMs, lk.Token())
	}
	wantResource := e.prefix + "{" + key
	if got.FenceResource != wantResource || got.FenceResource != g.FenceResource(key) {
		t.Fatalf("fence resource %q, want %q", got.FenceResource, wantResource)
	}
	f := got.Fence
	if f == nil || f.Resource != wantResource || f.Token != claimed || f.Claims != 1 || f.OpID == "" || f.Owner == "" ||
		time.Since(f.UpdatedAt) > time.Hour || time.Since(f.UpdatedAt) < -time.Hour {
		t.Fatalf("fence %+v, want the row guard.Do claimed with token %d", f, claimed)
	}
	if len(got.Problems) != 0 {
		t.Fatalf("problems in a healthy state: %q", got.Problems)
	}

	text := e.mustRun("inspect", key, "-prefix", e.prefix).stdout
	for _, want := range []string{
		fmt.Sprintf(`owner "alice", token %d`, lk.Token()),
		"3 waiting, next holder first",
		fmt.Sprintf("stored token  %d", lk.Token()),
		fmt.Sprintf(`fence row     %q: token %d`, wantResource, claimed),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	if i0, i1, i2 := strings.Index(text, `"w0"`), strings.Index(text, `"w1"`), strings.Index(text, `"w2"`); i0 < 0 || i0 > i1 || i1 > i2 {
		t.Errorf("text output lists the waiters out of order:\n%s", text)
	}
}

// A key with a fence row and nothing in Redis, under the default prefix: the
// fence row is named by the key alone, unless -namespace says otherwise.
func TestInspectFenceRowOnly(t *testing.T) {
	e := newEnv(t)
	key := "fence-only-" + testenv.RandomHex(6) // the default prefix is shared: a key of the test's own
	tx, err := e.db.BeginTx(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.ClaimOp(testCtx(t), tx, key, 77, "bob", "op-1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	var got inspectJSON
	decode(t, e.mustRun("inspect", "-json", key), &got)
	if got.Prefix != redislock.DefaultPrefix || got.Holder != nil || len(got.Queue) != 0 || got.StoredToken != 0 || got.StoredTokenTTLMs != 0 {
		t.Fatalf("redis side of a key only fenced: %+v", got)
	}
	if f := got.Fence; got.FenceResource != key || f == nil || f.Token != 77 || f.Owner != "bob" || f.OpID != "op-1" || f.Claims != 1 {
		t.Fatalf("fence resource %q row %+v, want %q with token 77 by bob, op-1", got.FenceResource, f, key)
	}

	decode(t, e.mustRun("inspect", "-json", "-namespace", "other", key), &got)
	if got.FenceResource != "other{"+key || got.Fence != nil {
		t.Fatalf("with -namespace other: resource %q fence %+v, want other{%s and none", got.FenceResource, got.Fence, key)
	}
}

// A key nobody used: free, no queue, no token, no fence row, and inspecting
// it wrote nothing to Redis or the database.
func TestInspectUnusedKey(t *testing.T) {
	e := newEnv(t)
	r := e.mustRun("inspect", "-prefix", e.prefix, "nobody")
	for _, want := range []string{"none, the lock is free", "queue         empty", "stored token  none",
		fmt.Sprintf("fence row     %q: none (never claimed)", e.prefix+"{nobody")} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	var got inspectJSON
	decode(t, e.mustRun("inspect", "-prefix", e.prefix, "-json", "nobody"), &got)
	if got.Holder != nil || got.Queue == nil || len(got.Queue) != 0 || got.Fence != nil || got.Problems == nil || got.FenceResource != e.prefix+"{nobody" {
		t.Fatalf("unused key: %+v", got)
	}
	if keys := e.rdb.Keys(testCtx(t), e.prefix+"*").Val(); len(keys) != 0 {
		t.Fatalf("inspect wrote Redis keys %v", keys)
	}
	var n int
	if err := e.db.Get(&n, "SELECT COUNT(*) FROM "+fence.Table); err != nil || n != 0 {
		t.Fatalf("inspect wrote %d fence rows (%v)", n, err)
	}
}

// Without the fence table inspect fails with status 1 and says to migrate.
func TestInspectWithoutFenceTable(t *testing.T) {
	e := newEnv(t)
	e.mustRun("migrate", "down", "-yes")
	r := e.run("inspect", "-prefix", e.prefix, "k")
	if r.code != exitFailed || !strings.Contains(r.stderr, "redfence migrate up") {
		t.Fatalf("inspect without the fence table: %v", r)
	}
}
