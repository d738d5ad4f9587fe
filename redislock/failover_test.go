package redislock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// primaryReplica starts a primary and a replica of it on loopback ports and
// returns a client for each.
func primaryReplica(t *testing.T) (primary, replica *testenv.Server, pc, rc *redis.Client) {
	t.Helper()
	primary = testenv.RedisServer(t, "--repl-diskless-sync-delay", "0")
	replica = testenv.RedisServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	pc, rc = primary.Client(), replica.Client()
	testenv.WaitReplicaSync(t, pc, rc)
	return primary, replica, pc, rc
}

func storedToken(t *testing.T, rdb redis.UniversalClient, l *Locker, key string) uint64 {
	t.Helper()
	s, err := rdb.Get(context.Background(), l.keys(key).token).Result()
	if err != nil {
		t.Fatalf("stored token: %v", err)
	}
	s, _, _ = strings.Cut(s, " ")
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A failover to a replica that missed the last grant still mints a larger
// token, where a counter (INCR) would have issued the same one again.
func TestTokenMonotonicAcrossFailover(t *testing.T) {
	primary, _, pc, rc := primaryReplica(t)
	ctx := testCtx(t)
	opt := &Options{Prefix: "rf"}
	old := newTestLocker(t, pc, opt)
	for range 3 {
		mustUnlock(t, mustLock(t, old, "acct"))
	}
	testenv.WaitReplicaSync(t, pc, rc)
	// Replication is cut: the replica becomes a primary of its own...
	if err := rc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	// ...while a client still gets a grant from the old primary, which dies.
	stale := mustLock(t, old, "acct")
	old.renew.remove(stale)
	primary.Kill()

	missed := storedToken(t, rc, old, "acct")
	if missed+1 > stale.Token() {
		t.Fatalf("the replica's stored token %d already covers the stale grant %d: the test shows nothing", missed, stale.Token())
	}
	promoted := newTestLocker(t, rc, opt)
	lk := mustLock(t, promoted, "acct")
	if lk.Token() <= stale.Token() {
		t.Fatalf("token after failover %d is not above the stale holder's %d", lk.Token(), stale.Token())
	}
	mustUnlock(t, lk)
}

// Restart without persistence, FLUSHALL and eviction of the token key all
// lose the stored token; new tokens are larger anyway.
func TestTokenMonotonicAfterDataLoss(t *testing.T) {
	srv := testenv.RedisServer(t)
	rdb := srv.Client()
	ctx := testCtx(t)
	l := newTestLocker(t, rdb, &Options{Prefix: "rf"})
	prev := uint64(0)
	next := func(what string) {
		t.Helper()
		lk := mustLock(t, l, "acct")
		if lk.Token() <= prev {
			t.Fatalf("after %s: token %d, not above %d", what, lk.Token(), prev)
		}
		prev = lk.Token()
		mustUnlock(t, lk)
	}
	next("start")
	next("hand-off")
	srv.Restart()
	if n := rdb.Exists(ctx, l.keys("acct").token).Val(); n != 0 {
		t.Fatal("restart kept the data: the test shows nothing")
	}
	next("restart without persistence")
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	next("FLUSHALL")
	rdb.Del(ctx, l.keys("acct").token) // what eviction or expiry does
	next("eviction of the token key")
}

// With MinReplicas, a grant acknowledged by a replica succeeds (directly and
// by hand-off); without the acknowledgement it is undone and Lock fails.
func TestMinReplicasWait(t *testing.T) {
	_, replica, pc, _ := primaryReplica(t)
	ctx := testCtx(t)
	l := newTestLocker(t, pc, &Options{Prefix: "rf", MinReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	a := mustLock(t, l, "acked")
	res := lockAsync(l, ctx, "acked")
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, pc, l, "acked")) == 1 })
	mustUnlock(t, a)
	o := <-res
	if o.err != nil {
		t.Fatalf("hand-off with a live replica: %v", o.err)
	}
	mustUnlock(t, o.lk)

	replica.Pause()
	defer replica.Resume()
	_, err := l.Lock(ctx, "unacked")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Lock without replica ack: %v, want ErrNotAcquired and ErrNotReplicated", err)
	}
	k := l.keys("unacked")
	if n := pc.Exists(ctx, k.lock, k.q, k.w).Val(); n != 0 {
		t.Fatalf("the unacknowledged grant was not undone (%d keys left)", n)
	}
	replica.Resume()
}
