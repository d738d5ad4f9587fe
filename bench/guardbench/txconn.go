package main

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
)

// class says whose operation a transaction belongs to: the hot key's callers
// or the cold rows' callers.
type class int

const (
	hot class = iota
	cold
	nClasses
)

func (c class) String() string {
	if c == hot {
		return "hot"
	}
	return "cold"
}

type classKey struct{}

// withClass marks ctx, and so every transaction begun with it (guard.Do
// begins its transaction with the caller's ctx), as class c's.
func withClass(ctx context.Context, c class) context.Context {
	return context.WithValue(ctx, classKey{}, c)
}

// txTally counts the database connections inside a transaction, by class
// and in all, exactly: a connection counts from the driver's BEGIN until the
// driver's Commit or Rollback returns, which hands it back to the pool.
// (guard.Do, when its ctx can end, sends COMMIT as a statement and then
// releases the transaction with a Rollback that finds none: its connection
// counts until then.) Every statement of the benchmark's operations runs in a
// transaction, guard's fence-row check included, so the total is the pool's
// connections in use.
//
// It also counts apart the transactions that have not sent their COMMIT or
// ROLLBACK (active): a transaction whose end is on its way, or whose COMMIT
// waits on the server for its log flush (InnoDB releases its row locks
// before that), holds a connection but keeps no caller of the key waiting.
type txTally struct {
	mu         sync.Mutex
	open       txCount
	peak       txCount
	active     txCount
	activePeak txCount
}

// txCount is a number of open transactions of each class (the last slot: of
// no class) and in all.
type txCount struct {
	by  [nClasses + 1]int
	all int
}

func (n *txCount) add(c, d int) {
	n.by[c] += d
	n.all += d
}

func (n *txCount) raise(to txCount) {
	for i := range n.by {
		n.by[i] = max(n.by[i], to.by[i])
	}
	n.all = max(n.all, to.all)
}

func (t *txTally) begin(c int) {
	t.mu.Lock()
	t.open.add(c, 1)
	t.active.add(c, 1)
	t.peak.raise(t.open)
	t.activePeak.raise(t.active)
	t.mu.Unlock()
}

// ending records that a transaction of class c sent its COMMIT or
// ROLLBACK (on), or that a COMMIT that chained a new transaction returned
// (off).
func (t *txTally) ending(c int, on bool) {
	t.mu.Lock()
	if on {
		t.active.add(c, -1)
	} else {
		t.active.add(c, 1)
		t.activePeak.raise(t.active)
	}
	t.mu.Unlock()
}

// end records the end of a transaction of class c; ending says that it
// had sent its COMMIT or ROLLBACK.
func (t *txTally) end(c int, ending bool) {
	t.mu.Lock()
	t.open.add(c, -1)
	if !ending {
		t.active.add(c, -1)
	}
	t.mu.Unlock()
}

// resetPeaks starts a new measurement from the transactions open now.
func (t *txTally) resetPeaks() {
	t.mu.Lock()
	t.peak, t.activePeak = t.open, t.active
	t.mu.Unlock()
}

// peaks returns the most transactions of each class, and in all, open at
// once since the last resetPeaks; active, the most of them that had not
// sent their COMMIT or ROLLBACK.
func (t *txTally) peaks() (open, active txCount) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peak, t.activePeak
}

// talliedConnector wraps the MySQL driver's connector so that every
// transaction is counted in tally.
type talliedConnector struct {
	driver.Connector
	tally *txTally
}

func (c *talliedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	full, ok := dc.(fullConn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("guardbench: driver connection %T lacks an interface database/sql uses", dc)
	}
	return &talliedConn{fullConn: full, tally: c.tally}, nil
}

// fullConn is every interface of the MySQL driver's connections that
// database/sql looks for, so that wrapping one changes nothing it does.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

type talliedConn struct {
	fullConn
	tally *txTally
	tx    *talliedTx // the transaction open on the connection, or nil
}

// ExecContext and QueryContext count a transaction's end sent as a
// statement: COMMIT, ROLLBACK, or guard's CALL redfence_commit(…) and
// redfence_rollback(…); redfence_commit_relay(…) commits and chains a new
// transaction, active again once it has answered.
func (c *talliedConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	chained := c.sent(q)
	r, err := c.fullConn.ExecContext(ctx, q, args)
	c.answered(chained, err)
	return r, err
}

func (c *talliedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	chained := c.sent(q)
	rows, err := c.fullConn.QueryContext(ctx, q, args)
	c.answered(chained, err)
	return rows, err
}

// answered records the answer to a statement sent reports chained for:
// the transaction it chained is active.
func (c *talliedConn) answered(chained bool, err error) {
	if chained && err == nil {
		c.tx.markEnding(false)
	}
}

// sent records statement q of the connection's transaction, and reports
// whether it is a COMMIT that chains a new transaction.
func (c *talliedConn) sent(q string) (chained bool) {
	t := c.tx
	if t == nil || t.done {
		return false
	}
	chained = strings.HasPrefix(q, "CALL redfence_commit_relay(")
	if chained || ends(q) {
		t.markEnding(true)
	}
	return chained
}

var _ fullConn = (*talliedConn)(nil)

func (c *talliedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.fullConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	cl := int(nClasses)
	if v, ok := ctx.Value(classKey{}).(class); ok {
		cl = int(v)
	}
	c.tally.begin(cl)
	t := &talliedTx{Tx: tx, tally: c.tally, class: cl}
	c.tx = t
	return t, nil
}

// Begin is not used by database/sql when BeginTx exists; it would escape the
// tally.
func (c *talliedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// talliedTx is a transaction counted in tally. Its methods run on the
// goroutine that holds the connection, as database/sql guarantees.
type talliedTx struct {
	driver.Tx
	tally  *txTally
	class  int
	ending bool
	done   bool
}

func (t *talliedTx) markEnding(on bool) {
	if t.ending != on {
		t.ending = on
		t.tally.ending(t.class, on)
	}
}

func (t *talliedTx) end() {
	if !t.done {
		t.done = true
		t.tally.end(t.class, t.ending)
	}
}

func (t *talliedTx) Commit() error {
	t.markEnding(true)
	defer t.end()
	return t.Tx.Commit()
}

func (t *talliedTx) Rollback() error {
	t.markEnding(true)
	defer t.end()
	return t.Tx.Rollback()
}

// ends reports whether statement q ends its transaction.
func ends(q string) bool {
	return strings.HasPrefix(q, "CALL redfence_commit(") || strings.HasPrefix(q, "CALL redfence_rollback(") ||
		strings.EqualFold(q, "COMMIT") || strings.EqualFold(q, "ROLLBACK")
}
