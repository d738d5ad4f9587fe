package redislock

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// newAttempt returns a Lock call of l on key that has not run yet.
func newAttempt(l *Locker, key string) *attempt {
	id := l.newID()
	return &attempt{l: l, key: key, k: l.keys(key), id: id, owner: id, lease: l.defLease}
}

// The first acquire request of a waiting Lock, applied twice (a client
// retrying a request whose reply was lost) with another waiter arriving in
// between, keeps the waiter's place: the queue stays in arrival order.
func TestRetriedFirstAcquireKeepsPlace(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	holder := mustLock(t, l, "retried")
	a, b := newAttempt(l, "retried"), newAttempt(l, "retried")
	ctx := context.Background() // no goroutine per request: nothing is abandoned here
	first, _, err := a.call(ctx, argFirst)
	if err != nil || first.granted || !first.head {
		t.Fatalf("a's first call: %+v %v, want queued first", first, err)
	}
	seq := rdb.ZScore(ctx, a.k.q, a.id).Val()
	if _, _, err := b.call(ctx, argFirst); err != nil {
		t.Fatal(err)
	}
	again, _, err := a.call(ctx, argFirst)
	if err != nil || again.granted || !again.head {
		t.Fatalf("a's retried call: %+v %v, want still first", again, err)
	}
	if q := queue(t, rdb, l, "retried"); !slices.Equal(q, []string{a.id, b.id}) {
		t.Fatalf("queue after the retry %v, want [a b] = [%s %s]", q, a.id, b.id)
	}
	if got := rdb.ZScore(ctx, a.k.q, a.id).Val(); got != seq {
		t.Fatalf("a's sequence changed from %v to %v", seq, got)
	}
	// The retried call is a heartbeat too: the entry's deadline is refreshed.
	if v := rdb.HGet(ctx, a.k.w, a.id).Val(); v == "" {
		t.Fatal("a's waiter entry is gone")
	}
	// The second waiter, retried while the first is queued, is not first.
	if r, _, err := b.call(ctx, argFirst); err != nil || r.head || r.pttl != -1 {
		t.Fatalf("b's retried call: %+v %v, want queued second, holder's lease unknown", r, err)
	}
	mustUnlock(t, holder)
	r, _, err := a.call(ctx, argRecheck)
	if err != nil || !r.granted {
		t.Fatalf("a after the holder left: %+v %v, want granted", r, err)
	}
	a.leave()
	b.leave()
}

// retryFirstAcquire applies the first acquire request of its client twice, as
// the client does after a read timeout, and runs between the two whatever the
// test puts in between.
type retryFirstAcquire struct {
	passHooks
	done    atomic.Bool
	applied atomic.Bool // set once the second application has returned
	between func()
}

func (h *retryFirstAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		err := next(ctx, cmd)
		if len(args) > 1 && args[1] == scriptAcquire.Hash() && h.done.CompareAndSwap(false, true) {
			h.between()
			err = next(ctx, cmd)
			h.applied.Store(true)
		}
		return err
	}
}

// A Lock whose first request is applied twice by the client, with a later
// caller queued in between, still gets the lock before that caller.
func TestLockRetriedByClientKeepsPlace(t *testing.T) {
	admin := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	other := newTestLocker(t, admin, &Options{Prefix: prefix})
	holder := mustLock(t, other, "client-retry")
	ctx := testCtx(t)

	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	// Load the script first, so that the retried request is the enqueue.
	if err := scriptAcquire.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	// The later caller starts from the hook, between the two applications,
	// once the first one has queued the early caller.
	lateCh := make(chan (<-chan lockOutcome), 1)
	h := &retryFirstAcquire{between: func() {
		lateCh <- lockAsync(other, ctx, "client-retry")
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if n, _ := admin.ZCard(ctx, other.keys("client-retry").q).Result(); n == 2 {
				return
			}
		}
	}}
	rdb.AddHook(h)
	l := newTestLocker(t, rdb, &Options{Prefix: prefix})
	early := lockAsync(l, ctx, "client-retry")
	late := <-lateCh
	waitFor(t, 5*time.Second, "the retried request applied", func() bool { return h.applied.Load() })
	mustUnlock(t, holder)
	select {
	case o := <-early:
		if o.err != nil {
			t.Fatal(o.err)
		}
		select {
		case o2 := <-late:
			t.Fatalf("the later caller holds the lock too (%v)", o2.err)
		default:
		}
		mustUnlock(t, o.lk)
	case o := <-late:
		if o.err == nil {
			mustUnlock(t, o.lk)
		}
		t.Fatal("the later caller got the lock first: the retried request lost its place")
	}
	o := <-late
	if o.err != nil {
		t.Fatal(o.err)
	}
	mustUnlock(t, o.lk)
}
