package main

import (
	"context"
	"database/sql/driver"
	"fmt"
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
type txTally struct {
	mu   sync.Mutex
	open txCount
	peak txCount
}

// txCount is a number of open transactions of each class (the last slot: of
// no class) and in all.
type txCount struct {
	by  [nClasses + 1]int
	all int
}

func (t *txTally) begin(c int) {
	t.mu.Lock()
	t.open.by[c]++
	t.open.all++
	t.peak.by[c] = max(t.peak.by[c], t.open.by[c])
	t.peak.all = max(t.peak.all, t.open.all)
	t.mu.Unlock()
}

func (t *txTally) end(c int) {
	t.mu.Lock()
	t.open.by[c]--
	t.open.all--
	t.mu.Unlock()
}

// resetPeaks starts a new measurement from the transactions open now.
func (t *txTally) resetPeaks() {
	t.mu.Lock()
	t.peak = t.open
	t.mu.Unlock()
}

// peaks returns the most transactions of each class, and in all, open at
// once since the last resetPeaks.
func (t *txTally) peaks() txCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peak
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
	return &talliedTx{Tx: tx, end: sync.OnceFunc(func() { c.tally.end(cl) })}, nil
}

// Begin is not used by database/sql when BeginTx exists; it would escape the
// tally.
func (c *talliedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

type talliedTx struct {
	driver.Tx
	end func()
}

func (t *talliedTx) Commit() error {
	defer t.end()
	return t.Tx.Commit()
}

func (t *talliedTx) Rollback() error {
	defer t.end()
	return t.Tx.Rollback()
}
