package guard

// early.go owns the transaction a call begins while its lock request is in
// flight: when no other call of the key is under way in this process, the
// BEGIN (and the wait for a connection) overlaps the lock's round trip, and
// the first attempt claims in it at once. If Redis queues the call instead
// of granting the lock, the transaction is given back at once, so that
// waiting for the lock still holds no connection. It decides nothing about
// the attempt that runs in it.

import (
	"context"
	"sync"

	"github.com/jmoiron/sqlx"
)

// early is a transaction begun for key ahead of the lock's grant.
type early struct {
	g   *Guard
	ctx context.Context
	key string

	done   chan struct{} // closed when the BEGIN has returned
	stx    *sqlx.Tx
	lg     *leg
	connID uint64
	err    error

	mu   sync.Mutex
	used bool // taken by the first attempt, or given back
}

// beginEarly begins a transaction for key on a goroutine, unless another
// call of key is under way in this process: that one's transaction (or
// batch) would be relayed to this call, or its claim would keep this one
// waiting anyway.
func (g *Guard) beginEarly(ctx context.Context, key string) *early {
	if !g.quiet(key) {
		return nil
	}
	e := &early{g: g, ctx: ctx, key: key, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.stx, e.lg, e.connID, e.err = g.begin(ctx, key)
	}()
	return e
}

// quiet reports whether no other call of key is under way in this process.
func (g *Guard) quiet(key string) bool {
	if g.open.ended(key) != nil {
		return false
	}
	if !g.relaying() {
		return true
	}
	rs := &g.relays
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.keys[key]
	return r == nil || r.refs <= 1
}

// take returns the early transaction for the first attempt, as begin
// would, once its BEGIN has returned; ok is false when there is none (e is
// nil, or it was given back).
func (e *early) take() (stx *sqlx.Tx, lg *leg, connID uint64, err error, ok bool) {
	if e == nil {
		return nil, nil, 0, nil, false
	}
	e.mu.Lock()
	if e.used {
		e.mu.Unlock()
		return nil, nil, 0, nil, false
	}
	e.used = true
	e.mu.Unlock()
	<-e.done
	return e.stx, e.lg, e.connID, e.err, true
}

// giveBack ends the early transaction unless an attempt took it: on a
// goroutine, once its BEGIN has returned, it is rolled back and its
// connection goes back to the pool. It may be called more than once.
func (e *early) giveBack() {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.used {
		e.mu.Unlock()
		return
	}
	e.used = true
	e.mu.Unlock()
	go func() {
		<-e.done
		if e.err != nil {
			return
		}
		mark := ""
		if e.lg != nil && e.connID != 0 {
			mark = e.lg.mark // chained by the key's previous call: restore its session
		}
		if mark != "" {
			e.g.rollback(e.ctx, e.stx, mark)
		} else {
			_ = e.stx.Rollback()
		}
		e.g.open.leave(e.key)
		if e.lg != nil {
			e.lg.end()
		}
	}()
}
