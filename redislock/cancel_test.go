package redislock

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// lockAsync starts l.Lock(ctx, key) and returns where its outcome arrives.
func lockAsync(l *Locker, ctx context.Context, key string) <-chan lockOutcome {
	out := make(chan lockOutcome, 1)
	go func() {
		lk, err := l.Lock(ctx, key)
		out <- lockOutcome{lk, err}
	}()
	return out
}

type lockOutcome struct {
	lk  *Lock
	err error
}

func TestCancelAndDeadlineLeaveTheQueue(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	holder := mustLock(t, l, "cancel")

	cctx, cancel := context.WithCancel(context.Background())
	res := lockAsync(l, cctx, "cancel")
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, "cancel")) == 1 })
	cancel()
	out := <-res
	if !errors.Is(out.err, ErrNotAcquired) || !errors.Is(out.err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want ErrNotAcquired and context.Canceled", out.err)
	}
	// The clean-up runs in the background once ctx has ended.
	waitFor(t, 5*time.Second, "cancelled waiter left the queue", func() bool { return len(queue(t, rdb, l, "cancel")) == 0 })

	dctx, dcancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer dcancel()
	_, err := l.Lock(dctx, "cancel")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past deadline: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}
	waitFor(t, 5*time.Second, "timed-out waiter left the queue", func() bool {
		return len(queue(t, rdb, l, "cancel")) == 0 && rdb.Exists(context.Background(), l.keys("cancel").w).Val() == 0
	})
	mustUnlock(t, holder)
	mustUnlock(t, mustLock(t, l, "cancel"))
}

// A grant that reaches a waiter whose context has just ended is passed on to
// the next waiter, not kept by nobody until its lease ends.
func TestGrantRacingCancelIsPassedOn(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{WaiterTimeout: 10 * time.Second})
	ctx := testCtx(t)
	holder := mustLock(t, l, "race")
	cctx, cancel := context.WithCancel(ctx)
	first := lockAsync(l, cctx, "race")
	waitFor(t, 5*time.Second, "first waiter queued", func() bool { return len(queue(t, rdb, l, "race")) == 1 })
	second := lockAsync(l, ctx, "race")
	waitFor(t, 5*time.Second, "second waiter queued", func() bool { return len(queue(t, rdb, l, "race")) == 2 })
	// Hand the lock to the first waiter without telling it (its message is
	// still on the way), then cancel it: the grant and the cancel race.
	l.renew.remove(holder)
	k := holder.k
	keys := []string{k.lock, k.token, k.q, k.w, k.ch + ":elsewhere", k.rel}
	if n, err := scriptUnlock.Run(ctx, rdb, keys, holder.id, 60000, "PUBLISH").Int64(); err != nil || n != 1 {
		t.Fatalf("unlock: %d %v", n, err)
	}
	cancel()
	out := <-first
	if !errors.Is(out.err, ErrNotAcquired) || !errors.Is(out.err, context.Canceled) {
		t.Fatalf("cancelled waiter: lock %v, err %v", out.lk, out.err)
	}
	select {
	case o := <-second:
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.lk.Token() <= holder.Token() {
			t.Fatalf("token %d not above %d", o.lk.Token(), holder.Token())
		}
		mustUnlock(t, o.lk)
	case <-time.After(l.opt.RecheckInterval / 2):
		t.Fatal("the grant to the cancelled waiter was not passed on at once")
	}
}

// failFirstAcquire makes the first acquire request of a client reach Redis
// and then fail as if the connection dropped before the reply.
type failFirstAcquire struct {
	passHooks
	failed atomic.Bool
}

func (h *failFirstAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 1 && args[1] == scriptAcquire.Hash() && h.failed.CompareAndSwap(false, true) {
			return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
		}
		return err
	}
}

// A transport error after the enqueue applied still takes the caller out of
// the queue, so nobody waits behind a ghost.
func TestTransportErrorLeavesQueue(t *testing.T) {
	admin := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.Prefix(t)
	other := newTestLocker(t, admin, &Options{Prefix: prefix})
	holder := mustLock(t, other, "transport")
	// Load the script first, so that the failing request is the enqueue.
	if err := scriptAcquire.Load(context.Background(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(&failFirstAcquire{})
	l := newTestLocker(t, rdb, &Options{Prefix: prefix})
	_, err := l.Lock(testCtx(t), "transport")
	var opErr *net.OpError
	if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &opErr) {
		t.Fatalf("Lock with a transport error: %v, want ErrNotAcquired and the net error", err)
	}
	if q := queue(t, admin, other, "transport"); len(q) != 0 {
		t.Fatalf("entry left in the queue after a transport error: %v", q)
	}
	mustUnlock(t, holder)
}

// Close wakes waiting Lock calls (ErrClosed, queue left) and releases held
// locks to the next waiter.
func TestCloseWakesWaitersAndReleases(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	l := New(testenv.Redis(t), &Options{Prefix: prefix})
	other := newTestLocker(t, rdb, &Options{Prefix: prefix})
	ctx := testCtx(t)
	held := mustLock(t, l, "held")
	blocker := mustLock(t, other, "blocked")
	waiting := lockAsync(l, ctx, "blocked")
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, other, "blocked")) == 1 })
	next := lockAsync(other, ctx, "held")
	waitFor(t, 5*time.Second, "other waiter queued", func() bool { return len(queue(t, rdb, other, "held")) == 1 })

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	out := <-waiting
	if !errors.Is(out.err, ErrClosed) || !errors.Is(out.err, ErrNotAcquired) {
		t.Fatalf("waiter at Close: %v, want ErrClosed and ErrNotAcquired", out.err)
	}
	if q := queue(t, rdb, other, "blocked"); len(q) != 0 {
		t.Fatalf("closed Locker's waiter still queued: %v", q)
	}
	select {
	case <-held.Done():
	default:
		t.Fatal("Done of a held lock not closed by Close")
	}
	if !errors.Is(held.Err(), ErrLost) || !errors.Is(held.Err(), ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrLost and ErrClosed", held.Err())
	}
	if err := held.Unlock(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Unlock after Close: %v, want ErrClosed", err)
	}
	o := <-next
	if o.err != nil || o.lk.Token() <= held.Token() {
		t.Fatalf("lock released by Close not passed on: %v", o.err)
	}
	mustUnlock(t, o.lk)
	mustUnlock(t, blocker)
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// lockWithin runs Lock with a 300ms deadline and checks that it returns soon
// after the deadline, whatever Redis does, with an error that satisfies both
// ErrNotAcquired and context.DeadlineExceeded.
func lockWithin(t *testing.T, l *Locker, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	lk, err := l.Lock(ctx, key)
	if el := time.Since(start); el > time.Second {
		t.Errorf("Lock with a 300ms deadline returned after %v", el)
	}
	if lk != nil || !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, %v; want ErrNotAcquired and context.DeadlineExceeded", lk, err)
	}
}

// warm loads the scripts and opens a connection, so that a request made
// while the server is paused hangs itself rather than a dial or a NOSCRIPT
// retry.
func warm(t *testing.T, l *Locker) {
	t.Helper()
	mustUnlock(t, mustLock(t, l, "warm"))
}

// closeAfterResume closes l while srv is paused and checks that Close waits
// for the pending clean-ups: it returns only once srv runs again.
func closeAfterResume(t *testing.T, l *Locker, srv *testenv.Server) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a clean-up still waited for Redis", err)
	case <-time.After(300 * time.Millisecond):
	}
	srv.Resume()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return after Redis came back")
	}
}

// When Redis stops answering (SIGSTOP) a Lock with a deadline still returns
// at the deadline; the queue clean-up runs in the background once Redis is
// back, and Close waits for it. Both the enqueue request itself and the wait
// after it are covered.
func TestLockReturnsAtDeadlineWhileRedisHangs(t *testing.T) {
	for _, pauseBeforeLock := range []bool{true, false} {
		name := "paused while waiting"
		if pauseBeforeLock {
			name = "paused before the enqueue"
		}
		t.Run(name, func(t *testing.T) {
			srv := testenv.RedisServer(t)
			admin := srv.Client()
			other := newTestLocker(t, srv.Client(), &Options{Prefix: "rf"})
			l := New(srv.Client(), &Options{Prefix: "rf"})
			holder := mustLock(t, other, "hang")
			if pauseBeforeLock {
				warm(t, l)
				srv.Pause()
				lockWithin(t, l, "hang")
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				res := lockAsync(l, ctx, "hang")
				waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, admin, other, "hang")) == 1 })
				srv.Pause()
				out := <-res
				if !errors.Is(out.err, ErrNotAcquired) || !errors.Is(out.err, context.DeadlineExceeded) {
					t.Fatalf("Lock = %v; want ErrNotAcquired and context.DeadlineExceeded", out.err)
				}
			}
			closeAfterResume(t, l, srv)
			if q := queue(t, admin, other, "hang"); len(q) != 0 {
				t.Fatalf("entry left in the queue: %v", q)
			}
			if v := admin.Get(context.Background(), other.keys("hang").lock).Val(); !strings.Contains(v, holder.id) {
				t.Fatalf("lock value %q, want it still held by %s", v, holder.id)
			}
			mustUnlock(t, holder)
		})
	}
}

// A free lock whose enqueue request hangs: the request applies after Lock
// gave up and grants the lock to nobody waiting; the clean-up that follows
// it releases the grant.
func TestAbandonedGrantIsReleased(t *testing.T) {
	srv := testenv.RedisServer(t)
	admin := srv.Client()
	l := New(srv.Client(), &Options{Prefix: "rf"})
	warm(t, l)
	srv.Pause()
	lockWithin(t, l, "free")
	closeAfterResume(t, l, srv)
	k := l.keys("free")
	if n := admin.Exists(context.Background(), k.lock, k.q, k.w).Val(); n != 0 {
		t.Fatalf("%d lock/queue keys left after an abandoned grant", n)
	}
	// The abandoned request did grant: a token was minted.
	if v := admin.Get(context.Background(), k.token).Val(); v == "" {
		t.Fatal("no token minted: the abandoned request never ran")
	}
}

// With nothing listening on the port, Lock fails within about its deadline
// and Close does not hang.
func TestLockAgainstRefusedPort(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))})
	t.Cleanup(func() { _ = rdb.Close() })
	l := New(rdb, &Options{Prefix: "rf"})
	lockWithin(t, l, "refused")
	start := time.Now()
	_ = l.Close()
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("Close took %v", el)
	}
}
