package guard_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// A Do's COMMIT fails on a lost connection while the key's next holders, in
// other processes, claim the fence row and commit before Do reads the row
// to settle. With the lock handed on at the claim (the default) that is
// the normal race, and the row then holds a newer token. What Do reports
// must follow the settle rule:
//   - the COMMIT applied (its reply lost), one newer claim since: the row
//     names Do's op as the one it replaced → nil;
//   - the COMMIT never reached the server, one newer claim since: the row
//     replaced an older token → ErrNotCommitted;
//   - either way, two newer claims since: the row cannot tell →
//     ErrOutcomeUnknown, never a definite answer.
//
// fn runs once in every case: neither outcome may be retried.
//
// It catches a settle that reads "a newer token" as "not committed" (work
// applied and reported failed, which invites the caller to do it again), a
// settle that ignores prev_op_id or prev_token, and one that answers
// definitely where two newer claims hide the attempt.
func TestSettleAfterNextHoldersClaimed(t *testing.T) {
	for _, c := range []struct {
		name    string
		drop    bool // the COMMIT never reaches the server (else its reply is lost)
		newer   int  // holders that claim and commit before Do settles
		want    error
		counter int
	}{
		{"reply lost, one newer claim", false, 1, nil, 2},
		{"never sent, one newer claim", true, 1, guard.ErrNotCommitted, 1},
		{"reply lost, two newer claims", false, 2, guard.ErrOutcomeUnknown, 3},
		{"never sent, two newer claims", true, 2, guard.ErrOutcomeUnknown, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			gate := &commitGate{held: make(chan struct{}), release: make(chan struct{})}
			e := newEnv(t, envConfig{dial: gate.wrap})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// The row exists, so that the commit parked below is Do's own.
			must(t, e.g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return nil }))

			calls := 0
			var token uint64
			done := make(chan error, 1)
			go func() {
				done <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
					calls++
					token = tx.Token()
					gate.arm(c.drop)
					return increment(ctx, tx, 1)
				})
			}()
			select {
			case <-gate.held:
			case err := <-done:
				t.Fatalf("Do returned %v before its COMMIT was cut", err)
			}
			// Next holders, each a process of its own, claim and commit
			// while Do waits for its COMMIT's answer.
			var tokens []uint64
			for range c.newer {
				g := otherProcess(t, e)
				must(t, g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
					tokens = append(tokens, tx.Token())
					return increment(ctx, tx, 1)
				}))
			}
			close(gate.release)
			err := <-done
			f, ferr := e.fence("k")
			must(t, ferr)
			t.Logf("Do (token %d) -> %v; newer tokens %v; row %d (replaced %d %q)", token, err, tokens, f.Token, f.PrevToken, f.PrevOpID)
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("Do = %v, want nil: the COMMIT applied, and the one newer claim names it", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("Do = %v, want %v", err, c.want)
			case errors.Is(c.want, guard.ErrOutcomeUnknown) && errors.Is(err, guard.ErrNotCommitted):
				t.Fatalf("Do = %v: a definite answer where two newer claims hide the attempt", err)
			}
			if calls != 1 || e.counter(1) != c.counter {
				t.Fatalf("fn ran %d times (want 1), counter %d (want %d)", calls, e.counter(1), c.counter)
			}
			if len(tokens) != c.newer || tokens[0] <= token || f.Token != tokens[len(tokens)-1] {
				t.Fatalf("newer tokens %v after %d, row token %d: the next holders did not claim after Do", tokens, token, f.Token)
			}
		})
	}
}

// otherProcess returns a Guard on e's key space with a Locker and pool of
// its own, as another process would have.
func otherProcess(t *testing.T, e *env) *guard.Guard {
	t.Helper()
	l := redislock.New(e.rdb, &redislock.Options{Prefix: e.prefix})
	t.Cleanup(func() { _ = l.Close() })
	return guard.New(l, openDB(t, e.dsn, func(c net.Conn) net.Conn { return c }), nil)
}

// commitGate cuts the next COMMIT once armed, on whichever connection sends
// it, and then holds the caller back until release is closed: with drop,
// the connection is closed instead of sending the COMMIT (the server rolls
// the transaction back); otherwise the COMMIT is sent, its reply read and
// the connection closed (the server committed). held is closed once the
// cut is made.
type commitGate struct {
	armed    atomic.Int32 // 0 off, 1 lose the reply, 2 drop
	held     chan struct{}
	release  chan struct{}
	heldOnce sync.Once
}

func (g *commitGate) arm(drop bool) {
	if drop {
		g.armed.Store(2)
	} else {
		g.armed.Store(1)
	}
}

func (g *commitGate) wrap(c net.Conn) net.Conn { return &gateConn{Conn: c, g: g} }

// hold signals the cut and waits for release.
func (g *commitGate) hold() error {
	g.heldOnce.Do(func() { close(g.held) })
	<-g.release
	return syscall.ECONNRESET
}

type gateConn struct {
	net.Conn
	g         *commitGate
	loseReply atomic.Bool
}

func (c *gateConn) Write(p []byte) (int, error) {
	if isCommit(p) {
		if c.g.armed.CompareAndSwap(2, 0) {
			_ = c.Conn.Close()
			return 0, c.g.hold()
		}
		if c.g.armed.CompareAndSwap(1, 0) {
			c.loseReply.Store(true)
		}
	}
	return c.Conn.Write(p)
}

func (c *gateConn) Read(p []byte) (int, error) {
	if c.loseReply.CompareAndSwap(true, false) {
		_, _ = c.Conn.Read(p) // the answer: the COMMIT applied
		_ = c.Conn.Close()
		return 0, c.g.hold()
	}
	return c.Conn.Read(p)
}
