package guard_test

import (
	"context"
	"net"
	"sync"
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
			slow := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(),
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return slowReads{Conn: c, d: 30 * time.Millisecond}, nil
				}})
			t.Cleanup(func() { _ = slow.Close() })
			lk := redislock.New(slow, &redislock.Options{Prefix: testenv.Prefix(t)})
			t.Cleanup(func() { _ = lk.Close() })
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
