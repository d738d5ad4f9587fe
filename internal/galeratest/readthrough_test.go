package galeratest

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// lookupResult is what a fence.Lookup returned.
type lookupResult struct {
	f   fence.Fence
	err error
}

// TestLookupThroughAnotherNodeSeesTheLatestClaim: a claim committed through
// node 1 is read with fence.Lookup through node 2 while node 2 has not
// applied it yet (its appliers are paused). Lookup must wait for node 2 to
// catch up (a causal read, wsrep_sync_wait) rather than return the previous
// claim from node 2's stale copy. The pool on node 2 sets nothing on its
// sessions: the causal read is Lookup's own.
func TestLookupThroughAnotherNodeSeesTheLatestClaim(t *testing.T) {
	w := newWorld(t, 60*time.Second)
	const key = "lookup:1"
	writer := w.instance("writer", 0, instanceConfig{})
	var tokens []uint64
	do := func() {
		t.Helper()
		if err := writer.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			tokens = append(tokens, tx.Token())
			return increment(ctx, tx, "op-"+time.Now().Format("150405.000000000"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	do()
	_ = w.counters() // every node has applied the first claim
	resume := w.pauseApplier(1)
	do()
	latest := tokens[len(tokens)-1]

	reader := w.open(w.dsns[1]) // plain sessions: wsrep_sync_wait is off
	res := make(chan lookupResult, 1)
	go func() {
		f, err := fence.Lookup(w.ctx, reader, writer.g.FenceResource(key))
		res <- lookupResult{f, err}
	}()
	waiting := make(chan error, 1)
	wctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	go func() { waiting <- w.awaitQuery(wctx, 1, "wsrep_sync_wait") }()
	var got lookupResult
	select {
	case got = <-res:
		// Lookup did not wait for node 2 to catch up.
	case err := <-waiting:
		if err != nil {
			t.Fatal(err)
		}
		resume()
		got = <-res
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.f.Token != latest {
		t.Fatalf("Lookup through node 2 returned token %d, want the latest claim's %d (node 2 had not applied it yet)", got.f.Token, latest)
	}
}

// cutCommit wraps the connections of a pool: once armed, the connection
// that sends COMMIT delivers it to the server and then breaks before the
// reply arrives (after the commit is visible on the writer's node), and
// every later connection goes to another node, as behind a load balancer
// that moved the client.
type cutCommit struct {
	mu      sync.Mutex
	addr    string // where new connections go
	armed   atomic.Bool
	cut     atomic.Bool
	then    string                                  // address for new connections after the cut
	visible func(ctx context.Context) (bool, error) // reports the commit on the writer's node
}

func (c *cutCommit) dial(ctx context.Context, _ string, _ string) (net.Conn, error) {
	c.mu.Lock()
	addr := c.addr
	c.mu.Unlock()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c}, nil
}

type cutConn struct {
	net.Conn
	c      *cutCommit
	sentAt atomic.Bool
}

// isCommit reports whether b is a COM_QUERY packet carrying guard's commit
// (CALL redfence_commit()) or a plain COMMIT.
func isCommit(b []byte) bool {
	return len(b) > 5 && b[4] == 0x03 && (string(b[5:]) == "COMMIT" || strings.HasPrefix(string(b[5:]), "CALL redfence_commit('"))
}

func (cc *cutConn) Write(b []byte) (int, error) {
	if cc.c.armed.Load() && isCommit(b) && cc.c.cut.CompareAndSwap(false, true) {
		n, err := cc.Conn.Write(b)
		cc.c.mu.Lock()
		cc.c.addr = cc.c.then
		cc.c.mu.Unlock()
		cc.sentAt.Store(true)
		return n, err
	}
	return cc.Conn.Write(b)
}

func (cc *cutConn) Read(b []byte) (int, error) {
	if cc.sentAt.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			ok, err := cc.c.visible(ctx)
			if ok || err != nil || ctx.Err() != nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = cc.Conn.Close()
		return 0, io.ErrUnexpectedEOF
	}
	return cc.Conn.Read(b)
}

// TestSettleThroughAnotherNode: the connection dies after COMMIT was sent,
// the transaction committed on node 1, and the settlement read that Do makes
// on a fresh connection lands on node 2, which has not applied the commit
// yet. Do must read the outcome causally (wait for node 2 to catch up) and
// return nil: reading node 2's stale row would say "not committed", inviting
// the caller to apply the work a second time.
func TestSettleThroughAnotherNode(t *testing.T) {
	w := newWorld(t, 60*time.Second)
	const key = "settle:1"
	cfg, err := mysql.ParseDSN(w.dsns[0])
	if err != nil {
		t.Fatal(err)
	}
	node2, err := mysql.ParseDSN(w.dsns[1])
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams = true
	cut := &cutCommit{addr: cfg.Addr, then: node2.Addr}
	cut.visible = func(ctx context.Context) (bool, error) {
		var n int
		err := w.synced[0].GetContext(ctx, &n, "SELECT COUNT(*) FROM applied WHERE op = 'cut'")
		return n == 1, err
	}
	cfg.DialFunc = cut.dial
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sqlx.NewDb(sql.OpenDB(connector), "mysql")
	t.Cleanup(func() { _ = db.Close() })
	in := w.instance("writer", 0, instanceConfig{db: db})

	if err := in.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, "first") }); err != nil {
		t.Fatal(err)
	}
	_ = w.counters() // every node has the key's fence row with the first claim
	resume := w.pauseApplier(1)
	cut.armed.Store(true)
	res := make(chan error, 1)
	go func() {
		res <- in.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, "cut") })
	}()
	waiting := make(chan error, 1)
	wctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	go func() { waiting <- w.awaitQuery(wctx, 1, "wsrep_sync_wait") }()
	var got error
	select {
	case got = <-res:
		// Do settled without waiting for node 2.
	case err := <-waiting:
		if err != nil {
			t.Fatal(err)
		}
		resume()
		got = <-res
	}
	if !cut.cut.Load() {
		t.Fatal("the COMMIT was never cut")
	}
	if got != nil {
		if errors.Is(got, guard.ErrNotCommitted) {
			t.Fatalf("Do: %v; the transaction committed on node 1, node 2 had not applied it yet", got)
		}
		t.Fatalf("Do: %v, want nil (committed)", got)
	}
	for i := range w.synced {
		if rows := w.appliedRows(i, "cut"); len(rows) != 1 {
			t.Errorf("node %d: the cut transaction applied %d times, want 1", i+1, len(rows))
		}
	}
}
