package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

// env is one test's servers: a Locker with a key prefix of its own, a
// database of its own with the fence table and a counters table, and a
// Guard over both.
type env struct {
	t      testing.TB
	rdb    *redis.Client
	prefix string
	locker *redislock.Locker
	db     *sqlx.DB
	dsn    string
	g      *guard.Guard
}

type envConfig struct {
	guard *guard.Options
	lock  *redislock.Options
	// dial, when set, wraps every MySQL connection of db.
	dial func(net.Conn) net.Conn
}

func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	e := &env{t: t, rdb: testenv.Redis(t), prefix: testenv.Prefix(t)}
	lo := redislock.Options{}
	if cfg.lock != nil {
		lo = *cfg.lock
	}
	lo.Prefix = e.prefix
	e.locker = redislock.New(e.rdb, &lo)
	t.Cleanup(func() { _ = e.locker.Close() })

	var admin *sqlx.DB
	admin, e.dsn = testenv.MySQLWithDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, admin.DB); err != nil {
		t.Fatalf("migrations.Apply: %v", err)
	}
	testenv.MustExec(t, admin, "CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
	testenv.MustExec(t, admin, "INSERT INTO counters VALUES (1, 0), (2, 0)")
	e.db = admin
	if cfg.dial != nil {
		e.db = openDB(t, e.dsn, cfg.dial)
	}
	e.g = guard.New(e.locker, e.db, cfg.guard)
	return e
}

// openDB opens a pool on dsn whose connections are wrapped by wrap.
func openDB(t testing.TB, dsn string, wrap func(net.Conn) net.Conn) *sqlx.DB {
	t.Helper()
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	mc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		t.Fatal(err)
	}
	db := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func (e *env) counter(id int) int {
	e.t.Helper()
	var n int
	if err := e.db.Get(&n, "SELECT n FROM counters WHERE id = ?", id); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// increment is a read-modify-write that loses updates unless serialised.
func increment(ctx context.Context, tx *guard.Tx, id int) error {
	var n int
	if err := tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = ?", id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = ?", n+1, id)
	return err
}

func (e *env) fence(key string) (fence.Fence, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return fence.Lookup(ctx, e.db, e.g.FenceResource(key))
}

// names are the Redis names of key's lock.
func (e *env) names(key string) redislock.KeyNames {
	e.t.Helper()
	n, err := redislock.KeyNamesFor(e.prefix, key)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// assertFree fails unless key's lock can be taken at once, i.e. Do released it.
func (e *env) assertFree(key string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lk, err := e.locker.TryLock(ctx, key)
	if err != nil {
		e.t.Fatalf("lock of %q still held after Do returned: %v", key, err)
	}
	if err := lk.Unlock(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// redisKeys lists the Redis names under the test's prefix.
func (e *env) redisKeys() []string {
	e.t.Helper()
	keys, err := e.rdb.Keys(context.Background(), e.prefix+"*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return keys
}

// connFaults wraps MySQL connections to count round trips and to break the
// connection around one COMMIT.
type connFaults struct {
	dropCommit      atomic.Bool  // next COMMIT: close the connection instead of sending it
	loseCommitReply atomic.Bool  // next COMMIT: send it, read the reply, then fail as a dead connection
	roundTrips      atomic.Int64 // reads that follow a write
	commits         atomic.Int64 // COMMITs that reached the server
	// blackholeCommit: next COMMIT: swallow it and everything after it on
	// that connection, as a network that silently drops packets. Reads
	// block until the connection is closed; closing it does not reach the
	// server (the socket stays open until the test ends), so the server
	// keeps the transaction open.
	blackholeCommit atomic.Bool
	blackholeNext   atomic.Bool   // the same for whatever statement is written next
	holes           chan net.Conn // sockets of blackholed connections
}

// newConnFaults returns connFaults that can blackhole connections; defer
// closeHoles, so that the server sees those connections end before the
// test's cleanup drops its database.
func newConnFaults() *connFaults { return &connFaults{holes: make(chan net.Conn, 16)} }

func (f *connFaults) closeHoles() {
	for {
		select {
		case c := <-f.holes:
			_ = c.Close()
		default:
			return
		}
	}
}

type faultConn struct {
	net.Conn
	f         *connFaults
	mu        sync.Mutex
	wrote     bool
	loseReply bool
	holed     bool          // swallowing everything (blackholeCommit)
	closed    chan struct{} // closed by Close
	closeOnce sync.Once
}

func (f *connFaults) wrap(c net.Conn) net.Conn {
	return &faultConn{Conn: c, f: f, closed: make(chan struct{})}
}

// Close ends the connection for the client. A blackholed connection keeps
// its socket open until the test's cleanup, as a peer behind a dead network
// would never see the close.
func (c *faultConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	c.mu.Lock()
	holed := c.holed
	c.mu.Unlock()
	if holed {
		return nil
	}
	return c.Conn.Close()
}

func isCommit(p []byte) bool {
	// A MySQL packet: 3-byte length, sequence number, then COM_QUERY (3) and
	// the text; Do commits with CALL redfence_commit('<mark>'), a relayed
	// transaction with CALL redfence_commit_relay('<mark>', '<next>').
	q := ""
	if len(p) >= 5 && p[4] == 3 {
		q = string(p[5:])
	}
	return strings.HasPrefix(q, "CALL redfence_commit('") || strings.HasPrefix(q, "CALL redfence_commit_relay('")
}

func (c *faultConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.wrote = true
	if c.holed {
		c.mu.Unlock()
		return len(p), nil
	}
	if c.f.blackholeNext.CompareAndSwap(true, false) || isCommit(p) && c.f.blackholeCommit.CompareAndSwap(true, false) {
		c.holed = true
		c.mu.Unlock()
		c.f.holes <- c.Conn
		return len(p), nil
	}
	if isCommit(p) {
		if c.f.dropCommit.CompareAndSwap(true, false) {
			c.mu.Unlock()
			_ = c.Conn.Close()
			return 0, syscall.ECONNRESET
		}
		c.f.commits.Add(1)
		if c.f.loseCommitReply.CompareAndSwap(true, false) {
			c.loseReply = true
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *faultConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.wrote {
		c.wrote = false
		c.f.roundTrips.Add(1)
	}
	lose := c.loseReply
	c.loseReply = false
	holed := c.holed
	c.mu.Unlock()
	if holed {
		<-c.closed
		return 0, net.ErrClosed
	}
	if lose {
		// The server has answered, so the COMMIT is durable; the client
		// never sees the answer.
		_, _ = c.Conn.Read(p)
		_ = c.Conn.Close()
		return 0, syscall.ECONNRESET
	}
	return c.Conn.Read(p)
}

// waitFor polls cond (a state only observable by asking a server) until it
// holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var errBoom = errors.New("boom")

type netConn = net.Conn

// atEnd returns o with the lock held until the transaction ends and no
// relaying (guard.HandOffAtEnd, NoRelay), for tests of what that mode
// promises: the lease guards fn, and a retry keeps its turn and token.
func atEnd(o guard.Options) *guard.Options {
	o.HandOff = guard.HandOffAtEnd
	o.NoRelay = true
	return &o
}

// queryCounter counts the statements sent on a connection whose text
// begins with prefix: the commits that chain the next transaction
// (relaying), the KILLs.
type queryCounter struct {
	netConn
	prefix string
	n      *atomic.Int64
}

func countQueries(c netConn, prefix string, n *atomic.Int64) netConn {
	return &queryCounter{netConn: c, prefix: prefix, n: n}
}

func (c *queryCounter) Write(p []byte) (int, error) {
	// A MySQL packet: 3-byte length, sequence number, then COM_QUERY (3) and the text.
	if len(p) >= 5 && p[4] == 3 && strings.HasPrefix(string(p[5:]), c.prefix) {
		c.n.Add(1)
	}
	return c.netConn.Write(p)
}
