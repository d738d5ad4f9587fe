package guard

// relay.go owns where an attempt's transaction comes from when relaying
// (the default): a transaction chained by the key's previous caller here,
// or one begun on the pool, and where a chained one goes when its caller
// leaves. It decides nothing about the attempt that runs in it.

import (
	"context"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// relayPark bounds how long a connection waits, outside the pool, for the
// next caller of its key. The next holder asks for one about a Redis round
// trip after the previous holder's COMMIT; a connection nobody takes by then
// goes back to the pool.
const relayPark = 50 * time.Millisecond

// relayMaxHold bounds how long one connection stays out of the pool, passed
// from caller to caller of a busy key: after that it is committed with a
// plain COMMIT and goes back, so that callers of other keys and everything
// else using the pool get their turn even when the pool has no more
// connections than busy keys. The key's next caller then takes one from the
// pool like everybody else.
const relayMaxHold = 500 * time.Millisecond

// relays pass database connections from one caller of a key to the next
// caller of the same key in this process (unless Options.NoRelay), so that the
// holder of a hot key does not queue for a pooled connection behind callers
// of other keys. A connection is passed on only while another caller of the
// key is under way here; otherwise it goes back to the pool.
//
// A caller that passes its connection on commits with COMMIT AND CHAIN,
// which starts the next transaction in the same round trip, and passes the
// open transaction: the next caller's first statement is its claim, with
// neither a BEGIN of its own nor the previous caller's release of the
// sql.Tx on its path. The chained transaction has read nothing yet, so its
// snapshot, like that of a fresh one, is taken after the claim.
type relays struct {
	mu   sync.Mutex
	keys map[string]*relay
}

// relay is one key's callers in this process and the connection they pass.
type relay struct {
	refs     int         // Do calls of the key under way here
	incoming int         // chained transactions on their way (reserve)
	waiting  []waiter    // callers waiting for a connection, first first
	spare    *leg        // a connection left for the next caller
	expire   *time.Timer // gives spare back to the pool
	// pending counts the work that may outlive its caller: expire's calls
	// giving a spare back, and pool requests of takeLeg. The last Do of the
	// key waits for it to reach 0, when drained, made by that Do, is
	// closed.
	pending int
	drained chan struct{}
	// returning holds the legs being given back (see giveBack); once
	// abandoned, because the key's last Do here stopped waiting for them
	// when its ctx ended, their ROLLBACK is cut short at once.
	returning map[*leg]struct{}
	abandoned bool
}

// waiter is a caller of takeLeg waiting for a passed-on transaction. One
// that does not race the pool (pooled false) relies on one on its way:
// there are never more of those than relay.incoming.
type waiter struct {
	ch     chan *leg // receives the leg, or nil: turn to the pool
	pooled bool      // also waits for the pool
}

// next removes and returns the waiter a passed-on leg goes to: the first
// that relies on one, else the first. relays.mu is held.
func (r *relay) next() waiter {
	i := 0
	for j, w := range r.waiting {
		if !w.pooled {
			i = j
			break
		}
	}
	w := r.waiting[i]
	r.waiting = append(r.waiting[:i], r.waiting[i+1:]...)
	return w
}

// reliant counts the waiters that do not race the pool. relays.mu is held.
func (r *relay) reliant() int {
	n := 0
	for _, w := range r.waiting {
		if !w.pooled {
			n++
		}
	}
	return n
}

// leg is a transaction that may outlive the Do that began it: committed
// with COMMIT AND CHAIN, it is passed on open to the next caller of its key.
// It is therefore begun on a ctx of its own, which carries the first
// caller's values and is cancelled (database/sql then rolls the transaction
// back and discards its connection, as for a transaction begun on the
// caller's ctx) when the ctx of the caller using it ends. Its statements
// are bound to that caller's ctx as usual.
type leg struct {
	tx *sqlx.Tx
	// connID is the session's connection id; marked, that the open
	// transaction is already marked as an attempt's (redfence_commit_chain
	// did it), so that the next caller claims at once (see session.go).
	connID uint64
	marked bool
	// mark is the name of the savepoint that marks the open transaction
	// (see session.go), when marked.
	mark string

	since  time.Time       // when its connection left the pool
	ctx    context.Context // the transaction's
	cancel context.CancelFunc
	unbind func() bool // detaches ctx from the current caller's ctx
}

func newLeg(ctx context.Context) *leg {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &leg{ctx: c, cancel: cancel, mark: newSessionMark()}
	l.bind(ctx)
	return l
}

// fresh reports whether the leg's connection has been out of the pool for
// less than relayMaxHold, so that it may be passed on again.
func (l *leg) fresh() bool { return time.Since(l.since) <= relayMaxHold }

// bind makes the end of ctx end the transaction.
func (l *leg) bind(ctx context.Context) { l.unbind = context.AfterFunc(ctx, l.cancel) }

// end frees what binds the leg, once its transaction has ended.
func (l *leg) end() {
	l.unbind()
	l.cancel()
}

// enter registers a Do on key, from before its lock wait to its end; leave
// ends it.
func (rs *relays) enter(key string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.keys == nil {
		rs.keys = make(map[string]*relay)
	}
	r := rs.keys[key]
	if r == nil {
		r = &relay{}
		rs.keys[key] = r
	}
	r.refs++
}

// leaveRelay ends what enter began. The key's last Do here gives back a
// parked leg and waits for the give-backs still running, until ctx (its
// caller's) ends: then it cuts them short, closing their connections, so
// that Do returns by the time its ctx ends.
func (g *Guard) leaveRelay(ctx context.Context, key string) {
	rs := &g.relays
	rs.mu.Lock()
	r := rs.keys[key]
	r.refs--
	var spare *leg
	last := r.refs == 0
	if last {
		delete(rs.keys, key)
		spare = r.takeSpare()
	}
	rs.mu.Unlock()
	if spare != nil {
		g.giveBack(ctx, r, spare)
	}
	if !last {
		return
	}
	rs.mu.Lock()
	if r.pending == 0 {
		rs.mu.Unlock()
		return
	}
	done := make(chan struct{})
	r.drained = done
	rs.mu.Unlock()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	rs.mu.Lock()
	r.abandoned = true
	for l := range r.returning {
		l.cancel()
	}
	rs.mu.Unlock()
	<-done
}

// endPending ends one unit of r.pending, and tells the key's last Do when
// none is left.
func (g *Guard) endPending(r *relay) {
	rs := &g.relays
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.pending--
	if r.pending == 0 && r.drained != nil {
		close(r.drained)
		r.drained = nil
	}
}

// giveBack rolls back the transaction of a leg nobody took, which has run
// no statement since its COMMIT AND CHAIN, and so returns its connection to
// the pool. The ROLLBACK is bounded by Options.UnlockTimeout and by ctx
// (the ctx of the Do that gives it back; one that ends closes the
// connection instead), and, for r's give-backs, cut short once the key's
// last Do stopped waiting for them (see leaveRelay).
func (g *Guard) giveBack(ctx context.Context, r *relay, l *leg) {
	stop := context.AfterFunc(ctx, l.cancel)
	defer stop()
	if r != nil {
		rs := &g.relays
		rs.mu.Lock()
		if r.abandoned {
			l.cancel()
		}
		if r.returning == nil {
			r.returning = make(map[*leg]struct{})
		}
		r.returning[l] = struct{}{}
		rs.mu.Unlock()
		defer func() {
			rs.mu.Lock()
			delete(r.returning, l)
			rs.mu.Unlock()
		}()
	}
	rctx, cancel := context.WithTimeout(l.ctx, g.opt.UnlockTimeout)
	defer cancel()
	_, _ = rollbackSession(rctx, l.tx, l.mark)
	_ = l.tx.Rollback() // releases the sql.Tx; nothing is sent on a closed connection
	l.end()
}

// takeSpare removes and returns the parked leg, if any. relays.mu is held.
func (r *relay) takeSpare() *leg {
	l := r.spare
	r.spare = nil
	if r.expire != nil {
		r.expire.Stop()
		r.expire = nil
	}
	return l
}

// reserve reports whether a caller of key that is about to commit the
// transaction of l should chain it and pass it on: more other callers of
// key are under way here than transactions are parked or on their way for
// them, and l's connection has been out of the pool for less than
// relayMaxHold. (With the lock handed on at the claim, the next holder is
// granted the lock about when this caller commits and takes the one the
// previous commit parked; this one then goes to the holder after it, who
// claims as soon as it is granted the lock.) A reservation ends with
// passOn(key, l, true) or unreserve.
func (g *Guard) reserve(key string, l *leg) bool {
	if !l.fresh() {
		return false
	}
	rs := &g.relays
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.keys[key]
	if r == nil {
		return false
	}
	spare := 0
	if r.spare != nil {
		spare = 1
	}
	if !(len(r.waiting) > r.incoming || r.refs-1 > r.incoming+spare) {
		return false
	}
	r.incoming++
	return true
}

// unreserve ends a reservation whose transaction will not come (its COMMIT
// failed); a caller waiting for it turns to the pool.
func (g *Guard) unreserve(key string) {
	rs := &g.relays
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.keys[key]
	r.incoming--
	if r.reliant() > r.incoming {
		r.next().ch <- nil
	}
}

// dropWaiter removes ch from r's waiters and passes on a leg that reached
// it meanwhile.
func (g *Guard) dropWaiter(ctx context.Context, key string, r *relay, ch chan *leg) {
	rs := &g.relays
	rs.mu.Lock()
	for i, w := range r.waiting {
		if w.ch == ch {
			r.waiting = append(r.waiting[:i], r.waiting[i+1:]...)
			break
		}
	}
	rs.mu.Unlock()
	select {
	case l := <-ch:
		if l != nil {
			g.passOn(ctx, key, l, false)
		}
	default:
	}
}

// takeLeg returns an open transaction for an attempt on key: the one a
// previous caller of key chained, or one begun on the pool. While other
// callers of key are under way here it takes whichever comes first. ctx
// bounds the wait and, from then on, the transaction.
func (g *Guard) takeLeg(ctx context.Context, key string) (*leg, error) {
	rs := &g.relays
	rs.mu.Lock()
	r := rs.keys[key]
	if r == nil { // not registered by Do: nothing to share
		rs.mu.Unlock()
		return g.beginLeg(ctx, key)
	}
	if l := r.takeSpare(); l != nil {
		rs.mu.Unlock()
		l.bind(ctx)
		return l, nil
	}
	if r.refs <= 1 {
		rs.mu.Unlock()
		return g.beginLeg(ctx, key)
	}
	relayed := make(chan *leg, 1)
	if r.incoming > r.reliant() {
		r.waiting = append(r.waiting, waiter{ch: relayed})
		rs.mu.Unlock()
		return g.awaitRelayed(ctx, key, r, relayed)
	}
	r.waiting = append(r.waiting, waiter{ch: relayed, pooled: true})
	r.pending++ // the pool request of raceLeg, which may outlive this call
	rs.mu.Unlock()
	return g.raceLeg(ctx, key, r, relayed)
}

// awaitRelayed waits for the transaction a caller of key is committing for
// this one (relayed), rather than take a connection the key would then
// hold on to. relays.mu is not held.
func (g *Guard) awaitRelayed(ctx context.Context, key string, r *relay, relayed chan *leg) (*leg, error) {
	select {
	case l := <-relayed:
		if l != nil {
			l.bind(ctx)
			return l, nil
		}
		return g.beginLeg(ctx, key) // its COMMIT failed
	case <-ctx.Done():
		g.dropWaiter(ctx, key, r, relayed)
		return nil, context.Cause(ctx)
	}
}

// raceLeg takes whichever comes first: a transaction relayed by another
// caller of key (relayed), or one begun on the pool. The loser is passed
// on. relays.mu is not held; r.pending counts the pool request.
func (g *Guard) raceLeg(ctx context.Context, key string, r *relay, relayed chan *leg) (*leg, error) {
	rs := &g.relays
	type begun struct {
		l   *leg
		err error
	}
	pool := make(chan begun, 1)
	pctx, cancel := context.WithCancel(ctx)
	var abandoned bool // guarded by rs.mu
	go func() {
		defer g.endPending(r)
		l, err := g.beginLeg(pctx, key)
		if err == nil && !l.unbind() {
			// pctx ended as the transaction began: database/sql rolls it back.
			l, err = nil, context.Cause(pctx)
		}
		// The send is made under rs.mu, as abandoned is set: a caller that
		// took a relayed transaction and then found pool empty must be sure
		// that this one will be passed on, not sent after it stopped looking.
		rs.mu.Lock()
		late := abandoned
		if !late {
			pool <- begun{l, err} // buffered: never blocks
		}
		rs.mu.Unlock()
		if late && err == nil {
			g.passOn(context.Background(), key, l, false) // the caller took a relayed one meanwhile
		}
	}()
	var p begun
	select {
	case l := <-relayed:
		if l == nil { // the one on its way did not come: the pool's, then
			p = <-pool
			cancel()
			break
		}
		rs.mu.Lock()
		abandoned = true
		rs.mu.Unlock()
		cancel()
		select {
		case p := <-pool: // begun before the request was abandoned
			if p.err == nil {
				g.passOn(ctx, key, p.l, false)
			}
		default:
		}
		l.bind(ctx)
		return l, nil
	case p = <-pool:
		cancel()
		g.dropWaiter(ctx, key, r, relayed)
	}
	if p.err != nil {
		return nil, p.err
	}
	p.l.bind(ctx)
	return p.l, nil
}

// begin begins an attempt's transaction on key: unless Options.NoRelay,
// a leg (see takeLeg), which lg returns and the caller must end unless it
// passes it on; otherwise a transaction of the pool, bound to ctx. connID
// is the session's connection id when the transaction is already marked
// (a leg chained by redfence_commit_chain), and 0 when claimSession is to
// mark it.
func (g *Guard) begin(ctx context.Context, key string) (stx *sqlx.Tx, lg *leg, connID uint64, err error) {
	if !g.relaying() {
		if err = g.awaitSpare(ctx, key); err != nil {
			return nil, nil, 0, err
		}
		if stx, err = g.db.BeginTxx(ctx, g.opt.TxOptions); err != nil {
			return nil, nil, 0, err
		}
	} else {
		if lg, err = g.takeLeg(ctx, key); err != nil {
			return nil, nil, 0, err
		}
		stx = lg.tx
		if lg.marked {
			lg.marked = false // for this attempt only
			connID = lg.connID
		}
	}
	g.open.enter(key)
	return stx, lg, connID, nil
}

// beginLeg begins a transaction for key on the pool, bound to ctx.
func (g *Guard) beginLeg(ctx context.Context, key string) (*leg, error) {
	if err := g.awaitSpare(ctx, key); err != nil {
		return nil, err
	}
	l := newLeg(ctx)
	tx, err := g.db.BeginTxx(l.ctx, g.opt.TxOptions)
	if err != nil {
		l.end()
		return nil, err
	}
	l.tx, l.since = tx, time.Now()
	return l, nil
}

// passOn is called with a leg whose transaction is open, has run nothing
// and is bound to no caller's ctx: it goes to a caller of key waiting for
// one, or is parked for the next caller of key for at most relayPark, or is
// rolled back, which returns its connection to the pool. reserved says it
// is the one a reserve call announced.
func (g *Guard) passOn(ctx context.Context, key string, l *leg, reserved bool) {
	rs := &g.relays
	rs.mu.Lock()
	r := rs.keys[key]
	if reserved {
		r.incoming--
	}
	switch {
	case r != nil && len(r.waiting) > 0:
		r.next().ch <- l
		l = nil
	case r != nil && r.refs > 1 && r.spare == nil && l.fresh():
		r.spare = l
		l = nil
		var t *time.Timer
		t = time.AfterFunc(relayPark, func() {
			rs.mu.Lock()
			var s *leg
			if r.expire == t { // still this parking, not a later one
				s = r.spare
				r.spare, r.expire = nil, nil
				// Under mu, so before the key's last Do can wait.
				r.pending++
			}
			rs.mu.Unlock()
			if s != nil {
				g.giveBack(context.Background(), r, s)
				g.endPending(r)
			}
		})
		r.expire = t
	}
	rs.mu.Unlock()
	if l != nil {
		g.giveBack(ctx, r, l)
	}
}
