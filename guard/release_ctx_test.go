package guard_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// silentAfterCommit is a MySQL connection that, once armed, goes silent
// right after the reply to a COMMIT: what is written next is swallowed and
// reads wait until the test lets go of it (the connection of a host that
// vanished).
type silentAfterCommit struct {
	net.Conn
	armed *bool
	mu    *sync.Mutex

	sawCommit bool
	silent    chan struct{} // closed when the connection goes silent
	release   chan struct{} // closed by the test's cleanup
	once      sync.Once
}

func (c *silentAfterCommit) Write(p []byte) (int, error) {
	c.mu.Lock()
	armed := *c.armed
	c.mu.Unlock()
	select {
	case <-c.silent:
		return len(p), nil
	default:
	}
	// A COM_QUERY packet: 3 bytes of length, a sequence number, 0x03.
	q := ""
	if len(p) > 5 && p[4] == 3 {
		q = string(p[5:])
	}
	if armed && c.sawCommit {
		close(c.silent)
		return len(p), nil
	}
	c.sawCommit = strings.HasPrefix(q, "CALL redfence_commit('")
	return c.Conn.Write(p)
}

func (c *silentAfterCommit) Read(p []byte) (int, error) {
	select {
	case <-c.silent:
		<-c.release
		return 0, net.ErrClosed
	default:
	}
	return c.Conn.Read(p)
}

// Do returns by the time its ctx ends even when the connection goes silent
// right after the COMMIT's reply, while the sql.Tx is being released: the
// work committed, so Do returns nil, and the release ends when the driver
// gives up on the connection.
func TestReleaseAfterCommitEndsWithCtx(t *testing.T) {
	var mu sync.Mutex
	armed := false
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e := newEnv(t, envConfig{dial: func(c net.Conn) net.Conn {
		return &silentAfterCommit{Conn: c, armed: &armed, mu: &mu, silent: make(chan struct{}), release: release}
	}})
	bg, cancelBg := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelBg()
	must(t, e.g.Do(bg, "silent", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row
	mu.Lock()
	armed = true
	mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- e.g.Do(ctx, "silent", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Do: %v, want nil (it committed)", err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("Do returned after %v, its ctx ended after 1s", el)
		}
	case <-time.After(6 * time.Second):
		t.Fatal("Do still running 5s after its ctx ended: it waited for the release of the committed transaction")
	}
	mu.Lock()
	armed = false
	mu.Unlock()
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter %d, want 1", n)
	}
}
