package redislock

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// A hand-off to a waiter of the releasing Locker is told by the release
// itself, not over pub/sub: the waiter gets the lock at once although it
// would re-check only much later, and nothing is published for it.
func TestLocalHandOffNotPublished(t *testing.T) {
	admin := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	opt := &Options{Prefix: prefix, RecheckInterval: 10 * time.Second, WaiterTimeout: 30 * time.Second}
	hook := &failUnlockReply{}
	l := newTestLocker(t, hookedClient(t, hook, nil), opt)
	other := newTestLocker(t, testenv.Redis(t), opt)
	ctx := testCtx(t)
	k := l.keys("local")
	obs := admin.PSubscribe(ctx, k.ch+"*")
	defer obs.Close()
	if _, err := obs.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	holder := mustLock(t, l, "local")
	local := lockAsync(l, ctx, "local")
	waitRechecking(t, hook, 1)
	remote := lockAsync(other, ctx, "local")
	waitFor(t, 5*time.Second, "remote waiter queued", func() bool { return len(queue(t, admin, l, "local")) == 2 })
	ch := other.waitChannel(k)
	waitFor(t, 5*time.Second, "remote waiter subscribed", func() bool { return admin.PubSubNumSub(ctx, ch).Val()[ch] == 1 })

	start := time.Now()
	mustUnlock(t, holder)
	o := <-local
	if o.err != nil {
		t.Fatal(o.err)
	}
	if el := time.Since(start); el > l.opt.RecheckInterval/2 {
		t.Fatalf("local waiter took %v: it found its grant by re-checking", el)
	}
	if o.lk.Token() <= holder.Token() {
		t.Fatalf("token %d not above %d", o.lk.Token(), holder.Token())
	}
	mustUnlock(t, o.lk) // hands off to the other Locker: published
	r := <-remote
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustUnlock(t, r.lk)
	// Messages arrive in the order Redis published them: the first is the
	// one for the other Locker's waiter, so none was sent for the local one.
	m, err := obs.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Channel != ch || m.Payload != r.lk.id+" "+strconv.FormatUint(r.lk.Token(), 10) {
		t.Fatalf("first hand-off published: %q on %q, want the remote waiter's on %q", m.Payload, m.Channel, ch)
	}
}

// failUnlockReply makes an armed client's unlock requests reach Redis and
// then fail as if the connection dropped before the reply; it counts the
// client's acquire requests.
type failUnlockReply struct {
	passHooks
	armed    atomic.Bool
	acquires atomic.Int32
}

// hookedClient returns a client with hook and the scripts loaded, so that
// every script request is one EVALSHA; dial, when not nil, is its dialer.
func hookedClient(t *testing.T, hook *failUnlockReply, dial func(context.Context, string, string) (net.Conn, error)) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), Dialer: dial})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, s := range []*redis.Script{scriptAcquire, scriptUnlock} {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rdb.AddHook(hook)
	return rdb
}

// queuedBehind sets up a Locker on a client with hook (and dial), whose
// waiters re-check only every 10 s, holding key with one waiter queued
// behind the holder and past its first re-check: a prompt grant then comes
// from a message or a wake-up, never from the timer.
func queuedBehind(t *testing.T, hook *failUnlockReply, dial func(context.Context, string, string) (net.Conn, error), key string) (*Locker, *Lock, <-chan lockOutcome) {
	t.Helper()
	l := newTestLocker(t, hookedClient(t, hook, dial), &Options{RecheckInterval: 10 * time.Second, WaiterTimeout: 30 * time.Second})
	holder := mustLock(t, l, key)
	waiter := lockAsync(l, testCtx(t), key)
	waitRechecking(t, hook, 1)
	return l, holder, waiter
}

// waitRechecking waits until the waiter queued behind a holder of l has made
// its first acquire call and the one after its subscription: from then on it
// re-checks only on its timer.
func waitRechecking(t *testing.T, hook *failUnlockReply, before int32) {
	waitFor(t, 5*time.Second, "waiter re-checked after subscribing", func() bool { return hook.acquires.Load() == before+2 })
}

func (h *failUnlockReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 1 && args[1] == scriptAcquire.Hash() {
			h.acquires.Add(1)
		}
		if len(args) > 1 && args[1] == scriptUnlock.Hash() && h.armed.Load() {
			err = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
			cmd.SetErr(err)
		}
		return err
	}
}

// When the reply to a release that handed the lock to a waiter of the same
// Locker is lost, nobody told the waiter: the Locker's waiters on the key
// re-check at once instead of at their next re-check.
func TestLostUnlockReplyWakesLocalWaiters(t *testing.T) {
	hook := &failUnlockReply{}
	l, holder, waiter := queuedBehind(t, hook, nil, "lost-reply")
	ctx := testCtx(t)

	hook.armed.Store(true)
	start := time.Now()
	var opErr *net.OpError
	if err := holder.Unlock(ctx); !errors.As(err, &opErr) {
		t.Fatalf("Unlock with its reply lost: %v, want the transport error", err)
	}
	hook.armed.Store(false)
	expectWoken(t, l, holder, waiter, start, "the lost reply")
}

// replyDropper dials connections that, once armed, let the next unlock
// request through and then lose its reply: the connection reads it and
// reports itself closed, as a connection that broke after Redis applied the
// request. The client then retries the request on a new connection by
// itself.
type replyDropper struct {
	armed   atomic.Bool
	dropped atomic.Int32
}

func (d *replyDropper) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d}, nil
}

type dropConn struct {
	net.Conn
	d    *replyDropper
	drop atomic.Bool
}

func (c *dropConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(scriptUnlock.Hash())) && c.d.armed.CompareAndSwap(true, false) {
		c.drop.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *dropConn) Read(p []byte) (int, error) {
	if c.drop.CompareAndSwap(true, false) {
		_, _ = c.Conn.Read(p) // the reply, thrown away
		_ = c.Conn.Close()
		c.d.dropped.Add(1)
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// When the client itself retries a release whose reply was lost, the retry
// is answered "released before", and the Locker's waiters on the key
// re-check at once: the first call may have handed one of them the lock
// without anyone telling it.
func TestClientRetriedUnlockWakesLocalWaiters(t *testing.T) {
	hook, drop := &failUnlockReply{}, &replyDropper{}
	l, holder, waiter := queuedBehind(t, hook, drop.dial, "retried")
	ctx := testCtx(t)

	drop.armed.Store(true)
	start := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatalf("Unlock retried by the client: %v, want nil", err)
	}
	if n := drop.dropped.Load(); n != 1 {
		t.Fatalf("%d replies dropped, want 1: the retry was not exercised", n)
	}
	expectWoken(t, l, holder, waiter, start, "the retried release")
}

// expectWoken checks that waiter, queued behind holder on l, got the lock
// well before its next timed re-check after start, with a larger token.
func expectWoken(t *testing.T, l *Locker, holder *Lock, waiter <-chan lockOutcome, start time.Time, after string) {
	t.Helper()
	o := <-waiter
	if o.err != nil {
		t.Fatal(o.err)
	}
	if el := time.Since(start); el > l.opt.RecheckInterval/2 {
		t.Fatalf("waiter took %v: it was not woken after %s", el, after)
	}
	if o.lk.Token() <= holder.Token() {
		t.Fatalf("token %d not above %d", o.lk.Token(), holder.Token())
	}
	mustUnlock(t, o.lk)
}
