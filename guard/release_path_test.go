package guard_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// gatedRollback, once armed, holds back every plain ROLLBACK written on
// the connections it wraps until it is opened, and closes held when it
// holds one.
type gatedRollback struct {
	mu    sync.Mutex
	armed bool
	open  chan struct{}
	held  chan struct{}
}

func (g *gatedRollback) wrap(c net.Conn) net.Conn { return &gatedConn{Conn: c, g: g} }

func (g *gatedRollback) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.open, g.held = true, make(chan struct{}), make(chan struct{})
}

// release opens the gate and disarms it.
func (g *gatedRollback) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed {
		g.armed = false
		close(g.open)
	}
}

type gatedConn struct {
	net.Conn
	g *gatedRollback
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if len(p) >= 5 && p[4] == 3 && string(p[5:]) == "ROLLBACK" {
		c.g.mu.Lock()
		armed, open, held := c.g.armed, c.g.open, c.g.held
		if armed {
			select {
			case <-held:
			default:
				close(held)
			}
		}
		c.g.mu.Unlock()
		if armed {
			<-open
		}
	}
	return c.Conn.Write(p)
}

// Do returns once its COMMIT is known: the ROLLBACK that releases the
// committed sql.Tx (and its connection) is not on the caller's path.
func TestDoReturnsBeforeTheCommittedConnectionIsReleased(t *testing.T) {
	for _, opt := range []guard.Options{{}, {Succession: guard.SuccessionOptions{NoRelay: true}}} {
		t.Run(map[bool]string{false: "relaying", true: "no-relay"}[opt.Succession.NoRelay], func(t *testing.T) {
			gate := &gatedRollback{}
			defer gate.release()
			e := newEnv(t, envConfig{dial: gate.wrap, guard: &opt})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })) // makes the fence row
			waitFor(t, "the first call's connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })

			gate.arm()
			held := gate.held
			done := make(chan error, 1)
			go func() {
				done <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Do = %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Do did not return while the release of its committed transaction was held back")
			}
			select { // the release follows Do, and is held back until the gate opens
			case <-held:
			case <-time.After(5 * time.Second):
				t.Fatal("no release of the committed transaction was held back: the test saw nothing")
			}
			if n := e.counter(1); n != 2 {
				t.Fatalf("counter %d, want 2", n)
			}
			gate.release()
			waitFor(t, "the connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })
		})
	}
}
