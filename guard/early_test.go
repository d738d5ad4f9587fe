package guard_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// slowReads delays every read of the connections it wraps by d, as a
// distant Redis would delay its replies.
type slowReads struct {
	net.Conn
	d time.Duration
}

func (c slowReads) Read(p []byte) (int, error) {
	time.Sleep(c.d)
	return c.Conn.Read(p)
}

// slowLocker returns a Locker (with prefix) whose Redis replies arrive d
// late.
func slowLocker(t *testing.T, prefix string, d time.Duration) *redislock.Locker {
	t.Helper()
	slow := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return slowReads{Conn: c, d: d}, nil
		}})
	t.Cleanup(func() { _ = slow.Close() })
	lk := redislock.New(slow, &redislock.Options{Prefix: prefix})
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// beginLog records when START TRANSACTION is written on the connections it
// wraps.
type beginLog struct {
	mu     sync.Mutex
	begins []time.Time
}

func (l *beginLog) wrap(c net.Conn) net.Conn { return &beginConn{Conn: c, l: l} }

type beginConn struct {
	net.Conn
	l *beginLog
}

func (c *beginConn) Write(p []byte) (int, error) {
	if len(p) >= 5 && p[4] == 3 && string(p[5:]) == "START TRANSACTION" {
		c.l.mu.Lock()
		c.l.begins = append(c.l.begins, time.Now())
		c.l.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// first returns when the first START TRANSACTION since reset was written.
func (l *beginLog) first() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.begins) == 0 {
		return time.Time{}
	}
	return l.begins[0]
}

func (l *beginLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.begins)
}

func (l *beginLog) reset() {
	l.mu.Lock()
	l.begins = nil
	l.mu.Unlock()
}

// An uncontended call begins its transaction while its lock request is in
// flight: with Redis replies 30ms late, START TRANSACTION is written before
// the lock is granted, and the call claims in that transaction.
func TestUncontendedBeginOverlapsTheLockRequest(t *testing.T) {
	for _, opt := range []guard.Options{{}, {Succession: guard.SuccessionOptions{NoRelay: true}}} {
		t.Run(map[bool]string{false: "relaying", true: "no-relay"}[opt.Succession.NoRelay], func(t *testing.T) {
			log := &beginLog{}
			e := newEnv(t, envConfig{dial: log.wrap, guard: &opt})
			lk := slowLocker(t, testenv.Prefix(t), 30*time.Millisecond)
			var granted time.Time
			o := opt
			o.Hooks.OnAcquired = func(string, uint64, time.Duration) { granted = time.Now() }
			g := guard.New(lk, e.db, &o)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range 2 { // the first call makes the fence row
				log.reset()
				must(t, g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
				began := log.first()
				if n := log.count(); i == 1 && n != 1 {
					t.Fatalf("call 2 sent %d START TRANSACTION, want 1: it did not claim in the transaction it began early", n)
				}
				if began.IsZero() || !began.Before(granted) {
					t.Fatalf("call %d: START TRANSACTION at %v, the lock granted at %v: the BEGIN did not overlap the lock request",
						i+1, began.Format("15:04:05.000000"), granted.Format("15:04:05.000000"))
				}
			}
			if n := e.counter(1); n != 2 {
				t.Fatalf("counter %d, want 2", n)
			}
		})
	}
}

// A call that Redis queues behind another holder gives the transaction it
// began meanwhile back at once: waiting for the lock holds no connection.
func TestAQueuedCallHoldsNoConnection(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	waitFor(t, "the first call's connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })

	other := redislock.New(e.rdb, &redislock.Options{Prefix: e.prefix}) // another process
	t.Cleanup(func() { _ = other.Close() })
	held, err := other.Lock(ctx, "k")
	must(t, err)
	done := make(chan error, 1)
	go func() {
		done <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
	}()
	waitFor(t, "the call to wait in the lock's queue", func() bool {
		info, err := redislock.Inspect(ctx, e.rdb, e.prefix, "k")
		return err == nil && len(info.Queue) == 1
	})
	waitFor(t, "no connection in use while the call waits", func() bool { return e.db.Stats().InUse == 0 })
	select {
	case err := <-done:
		t.Fatalf("Do returned while the lock was held elsewhere: %v", err)
	default:
	}
	must(t, held.Unlock(ctx))
	must(t, <-done)
	if n := e.counter(1); n != 2 {
		t.Fatalf("counter %d, want 2", n)
	}
}

// In database mode no lock request goes out, so no transaction is begun
// ahead of one: a call begins one transaction.
func TestDatabaseModeBeginsNoEarlyTransaction(t *testing.T) {
	log := &beginLog{}
	f := newFBEnvDial(t, guard.Options{Outage: guard.OutageOptions{Fallback: guard.FallbackDatabase, After: 1, Retry: time.Minute}}, log.wrap)
	f.srv.Kill()
	_ = f.do(t, 5*time.Second) // notices the outage
	must(t, f.do(t, 5*time.Second))
	waitFor(t, "every connection back in the pool", func() bool { return f.db.Stats().InUse == 0 })
	log.reset()
	must(t, f.do(t, 5*time.Second))
	if n := log.count(); n != 1 {
		t.Fatalf("a database-mode call sent %d START TRANSACTION, want 1", n)
	}
}

// A Redis that does not answer does not keep an early transaction's
// connection from the pool: it is given back after a short wait.
func TestAStalledRedisHoldsNoConnection(t *testing.T) {
	e := newEnv(t, envConfig{})
	srv := testenv.RedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	lk := redislock.New(rdb, &redislock.Options{Prefix: e.prefix})
	t.Cleanup(func() { _ = lk.Close() })
	g := guard.New(lk, e.db, nil)
	e.db.SetMaxOpenConns(1)
	must(t, g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	waitFor(t, "every connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })
	srv.Pause()
	defer srv.Resume()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done <- g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
	}()
	// While the call waits for Redis, another user of the pool gets the
	// one connection.
	q, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var one int
	if err := e.db.GetContext(q, &one, "SELECT 1"); err != nil {
		t.Fatalf("the pool's connection while a call waits for a stalled Redis: %v", err)
	}
	<-done
}

// A panic in OnAcquired does not leak the transaction begun early.
func TestAHookPanicLeaksNoEarlyTransaction(t *testing.T) {
	boom := true
	e := newEnv(t, envConfig{guard: &guard.Options{Hooks: guard.Hooks{OnAcquired: func(string, uint64, time.Duration) {
		if boom {
			boom = false
			panic("hook")
		}
	}}}})
	func() {
		defer func() { _ = recover() }()
		_ = e.g.Do(context.Background(), "k", func(context.Context, *guard.Tx) error { return nil })
	}()
	waitFor(t, "every connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })
}

// oneShotDelay makes the first matching write after it is armed wait d.
type oneShotDelay struct{ d atomic.Int64 }

type delayConn struct {
	net.Conn
	s     *oneShotDelay
	match func([]byte) bool
}

func (c *delayConn) Write(p []byte) (int, error) {
	if c.match(p) {
		if d := c.s.d.Swap(0); d > 0 {
			time.Sleep(time.Duration(d))
		}
	}
	return c.Conn.Write(p)
}

// With NoRelay, a call B of a key that another call A of this process
// waits for in the lock's queue begins no early transaction: had it begun
// one (its BEGIN slow, so that A's spare-connection check missed it), and
// then been granted the lock right after A's hand-off, its claim would hold
// the pool's last connection while it waited for A's fence row, and A's fn,
// reading through the pool, would stall.
func TestNoEarlyTransactionBesideAQueuedCallOfTheKey(t *testing.T) {
	noRelay := &guard.Options{Succession: guard.SuccessionOptions{NoRelay: true}}
	sqlDelay := &oneShotDelay{}
	e := newEnv(t, envConfig{guard: noRelay, dial: func(c net.Conn) net.Conn {
		return &delayConn{Conn: c, s: sqlDelay, match: func(p []byte) bool {
			return len(p) >= 5 && p[4] == 3 && string(p[5:]) == "START TRANSACTION"
		}}
	}})
	redisDelay := &oneShotDelay{}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), Dialer: func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, n, a)
		if err != nil {
			return nil, err
		}
		return &delayConn{Conn: c, s: redisDelay, match: func([]byte) bool { return true }}, nil
	}})
	t.Cleanup(func() { _ = rdb.Close() })
	lk := redislock.New(rdb, &redislock.Options{Prefix: e.prefix})
	t.Cleanup(func() { _ = lk.Close() })
	g := guard.New(lk, e.db, noRelay)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	e.db.SetMaxOpenConns(2)
	waitFor(t, "every connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })
	other := redislock.New(e.rdb, &redislock.Options{Prefix: e.prefix})
	t.Cleanup(func() { _ = other.Close() })
	held, err := other.Lock(ctx, "k")
	must(t, err)
	inside, read, aDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		aDone <- g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			close(inside)
			<-read
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			var one int
			if err := e.db.GetContext(rctx, &one, "SELECT 1"); err != nil {
				return err
			}
			return increment(ctx, tx, 1)
		})
	}()
	waitFor(t, "A queued", func() bool {
		i, err := redislock.Inspect(ctx, e.rdb, e.prefix, "k")
		return err == nil && len(i.Queue) == 1
	})
	waitFor(t, "A's early transaction given back", func() bool { return e.db.Stats().InUse == 0 })
	sqlDelay.d.Store(int64(300 * time.Millisecond))
	redisDelay.d.Store(int64(800 * time.Millisecond))
	bDone := make(chan error, 1)
	go func() {
		bDone <- g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
	}()
	time.Sleep(50 * time.Millisecond) // B's requests are on their way, slowly
	must(t, held.Unlock(ctx))
	<-inside
	time.Sleep(1200 * time.Millisecond) // B's lock request has arrived and been granted
	close(read)
	if err := <-aDone; err != nil {
		t.Errorf("A: %v", err)
	}
	if err := <-bDone; err != nil {
		t.Errorf("B: %v", err)
	}
}

// A key whose call Redis queued lately is contended: its next calls begin
// no transaction ahead of the grant (they would pay a BEGIN and a ROLLBACK
// for nothing), while other keys still do.
func TestAContendedKeyBeginsNoEarlyTransaction(t *testing.T) {
	log := &beginLog{}
	e := newEnv(t, envConfig{dial: log.wrap})
	lk := slowLocker(t, e.prefix, 30*time.Millisecond)
	var granted time.Time
	g := guard.New(lk, e.db, &guard.Options{Hooks: guard.Hooks{OnAcquired: func(string, uint64, time.Duration) { granted = time.Now() }}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inc := func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }
	for _, key := range []string{"hot", "cold"} { // make the fence rows
		must(t, g.Do(ctx, key, inc))
	}
	// Another process holds "hot": a call of it is queued.
	other := redislock.New(e.rdb, &redislock.Options{Prefix: e.prefix})
	t.Cleanup(func() { _ = other.Close() })
	held, err := other.Lock(ctx, "hot")
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- g.Do(ctx, "hot", inc) }()
	waitFor(t, "the call to wait in the lock's queue", func() bool {
		info, err := redislock.Inspect(ctx, e.rdb, e.prefix, "hot")
		return err == nil && len(info.Queue) == 1
	})
	must(t, held.Unlock(ctx))
	must(t, <-done)

	log.reset()
	must(t, g.Do(ctx, "hot", inc))
	if began := log.first(); began.Before(granted) {
		t.Fatalf("a call of a key queued lately began its transaction at %v, before the grant at %v",
			began.Format("15:04:05.000000"), granted.Format("15:04:05.000000"))
	}
	log.reset()
	must(t, g.Do(ctx, "cold", inc))
	if began := log.first(); !began.Before(granted) {
		t.Fatalf("a call of another key began its transaction at %v, not before the grant at %v",
			began.Format("15:04:05.000000"), granted.Format("15:04:05.000000"))
	}
}
