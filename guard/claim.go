package guard

// claim.go owns the first step of an attempt, for one caller and for a
// batch alike: begin the attempt's transaction (from the pool, or relayed),
// claim the key's fence row in it, and, once the claim holds the row, pass
// the lock on (handOn, see handoff.go). It returns the open transaction, or
// the claim's failure as a value for the attempt loop to decide on (a
// missing fence row, a stale token, a retryable error); it runs no fn and
// commits nothing.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
)

// stepper records an attempt's steps: a Do's tracer, or the members of a
// batch (see batchSteps).
type stepper interface {
	now() time.Time
	step(kind StepKind, token uint64, attempt int, start time.Time, err error)
}

// attemptTx is an attempt's transaction, from its BEGIN to its end.
type attemptTx struct {
	g   *Guard
	ctx context.Context // the transaction's: the caller's (or the batch's), not lctx
	stx *sqlx.Tx
	tx  *Tx
	lg  *leg // the relayed leg the transaction is on, or nil
	// connID is the session's connection id, once the claim has answered.
	connID uint64
	// kept: lg is taken care of (passed on or ended by the commit).
	kept bool
	// finished: committed, or rolled back.
	finished bool
	// cancel ends fn's ctx, when handOn made it.
	cancel context.CancelCauseFunc
	// later is the hand-off handOn left for handOnAfterFn.
	later *handOff
}

// handOnAfterFn passes the lock on, when handOn left it for after fn: fn
// has returned, and the claim holds the fence row.
func (a *attemptTx) handOnAfterFn() {
	if a.later != nil {
		a.later.release(a.ctx)
		a.later = nil
	}
}

// handOn passes the lock on (ho), now that the claim holds the fence row,
// and returns the ctx for fn. From here the fence row's lock keeps the next
// holder out, so the Redis lock goes to it now (in database mode, dbMode,
// there is none). What ends fn's right to run is then no longer a lost
// lease but the end of this transaction (a deadlock, a lost connection, a
// statement that ended it): the next holder's claim goes through at once,
// so fn's ctx ends with it. Without either, fn's ctx is lctx.
//
// With afterFn (claims ride with fn's first statement, see ride.go), the
// lock is passed on only once fn has returned (handOnAfterFn): the next
// holder's fn may start before its claim, and must not while this fn runs.
func (a *attemptTx) handOn(ctx, lctx context.Context, ho *handOff, dbMode, afterFn bool) context.Context {
	if ho == nil && !dbMode {
		return lctx
	}
	if afterFn {
		a.later = ho
	} else {
		ho.release(ctx)
	}
	c, cancel := context.WithCancelCause(lctx)
	a.cancel = cancel
	a.tx.onFail = cancel
	return c
}

// close ends what a is still responsible for: it rolls the transaction
// back unless it was finished, and ends the leg unless it was kept. It runs
// on every path, panics included.
func (a *attemptTx) close() {
	if a.cancel != nil {
		a.cancel(nil)
	}
	a.rollback()
	a.tx.finish()
	a.g.open.leave(a.tx.key)
	if a.lg != nil && !a.kept {
		a.lg.end()
	}
}

// rollback rolls a's transaction back now: without redfence_rollback when
// nothing marked the session (its claim, which was to ride, was never
// sent).
func (a *attemptTx) rollback() { a.rollbackEnd() }

// rollbackEnd is rollback, reporting what it found (see rollbackGone);
// once a is finished, or when nothing marked the session, there is
// nothing to find.
func (a *attemptTx) rollbackEnd() ending {
	if a.finished {
		return ending{answered: true}
	}
	a.finished = true
	if a.tx.bare() {
		_ = a.stx.Rollback()
		return ending{answered: true}
	}
	end := a.g.rollbackGone(a.ctx, a.stx, a.tx.mark)
	a.endUnanswered(end)
	return end
}

// endUnanswered ends a's session on the server (KILL, from another
// connection of the pool) when a statement of fn may have been left
// running there (Tx.cut) and the rollback got no answer (end): a's ctx had
// ended, or the connection was lost. The driver closes the socket of a
// statement whose ctx ends, but the server thread goes on, waiting for a
// row lock or running, and its transaction keeps the fence row's lock: the
// key's next holder would wait for it, up to innodb_lock_wait_timeout. The
// session is this attempt's alone: its connection, or its ctx, has ended
// (with completion_type RELEASE, database/sql's own ROLLBACK ends the
// session), so it neither commits nor passes on, and the server never
// gives its id to another connection. Not with a multi-primary cluster,
// where the KILL could reach another node, on which the id is another
// session's.
func (a *attemptTx) endUnanswered(end ending) {
	if end.answered || a.connID == 0 || !a.tx.cut.Load() || a.g.dbCheck.multiPrimary.Load() {
		return
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), settleGrace)
	defer cancel()
	a.g.kill(kctx, a.connID, false)
}

// claim begins attempt n's transaction on h.key and claims the fence row
// with h's token, or, in database mode (token 0), with a token the claim
// mints (a.tx.Token). The transaction is bound to ctx, not to lctx: a lock
// lost after fn returned must not roll back a commit that is safe to make;
// the claim itself is bound to lctx. On success the caller must close a.
// Otherwise a is nil, err is a noFenceRow when the key has no fence row
// (for makeRow), wraps ErrFenced when the token is stale, and retry says
// whether a new attempt may follow. st records the claim step.
//
// With first, the Read fn begins with (DoRead), the claim carries its
// SELECT where it can, and its result is scanned before claim returns
// (Tx.first).
//
// With ride, the claim is not sent here: it rides with fn's first statement
// (see ride.go), or is sent on its own before any other statement of fn
// and, when fn sent none, before COMMIT. Its failure then reaches the
// attempt through the Tx (claimFailure), as the same values.
func (g *Guard) claim(ctx, lctx context.Context, h holding, n int, st stepper, ride bool, first *Read) (a *attemptTx, retry bool, err error) {
	key := h.key
	if lctx.Err() != nil {
		err = g.lostOr(lctx, context.Cause(lctx))
		st.step(StepClaim, h.token, n, h.claimStart, err)
		return nil, false, err
	}
	stx, lg, connID, err, ok := h.early.take()
	if !ok {
		stx, lg, connID, err = g.begin(ctx, key)
	}
	if err != nil {
		err = fmt.Errorf("guard: %q: begin: %w", key, err)
		st.step(StepClaim, h.token, n, h.claimStart, err)
		return nil, fence.Retryable(err) && lctx.Err() == nil, err
	}
	tx := newTx(stx, key, g.resource(key), h.token, h.owner, n)
	if connID != 0 {
		tx.mark = lg.mark // marked by the commit that chained it
	} else {
		tx.mark = newSessionMark()
	}
	if lg != nil {
		lg.mark = tx.mark
	}
	a = &attemptTx{g: g, ctx: ctx, stx: stx, tx: tx, lg: lg}
	tx.settleLost = func(ctx context.Context) (bool, error) { return g.settle(ctx, tx) }
	c := &claiming{a: a, lctx: lctx, h: h, n: n, st: st, connID: connID}
	if ride {
		tx.deferClaim(c, connID == 0, g.closedTx.Load())
		return a, false, nil
	}
	var r *rideStmt
	if first != nil && g.carries(h) {
		r = newRide(first.query, first.args, false)
	}
	rows, err := c.run(lctx, r)
	if err != nil {
		a.close()
		return nil, c.retry, err
	}
	if rows != nil {
		done := false
		defer func() {
			if !done {
				a.close() // a destination's Scan panicked
			}
		}()
		tx.first = first.scan(ctx, tx, rows) // nil: r goes as it is
		done = true
	}
	return a, false, nil
}

// claiming is the claim of an attempt's transaction, sent by claim or,
// when it rides, by fn's first statement (see ride.go).
type claiming struct {
	a      *attemptTx
	lctx   context.Context
	h      holding
	n      int
	st     stepper
	connID uint64 // the session's, when the transaction is already marked (relayed)
	retry  bool   // after a failure: whether a new attempt may follow
	// fenced, when set, reports a stale token of a claim that rode, on
	// Do's goroutine (flushClaimStep).
	fenced func()
}

// run sends the claim, with r when r is not nil, on ctx (lctx, or the ctx
// of fn's statement, which the end of lctx also ends while the claim
// waits), and returns the rows of r's result. The failure is one of the
// values claim documents, with c.retry set.
func (c *claiming) run(ctx context.Context, r *rideStmt) (*sqlx.Rows, error) {
	a, g := c.a, c.a.g
	tx := a.tx
	connID, rows, err := g.claimSession(ctx, c.lctx, a.stx, tx, c.connID, r)
	a.connID = connID
	if a.lg != nil {
		a.lg.connID = connID
	}
	tx.killQuery = func(ctx context.Context) func() {
		stop := g.killOnEnd(ctx, connID, settleGrace, true)
		return func() { stop(false) } // see onEnd
	}
	c.retry, err = c.outcome(err)
	if nr := (noFenceRow{}); !errors.As(err, &nr) { // not a failed claim: see makeRow
		if tx.claim.deferred {
			// fn's statement may run on a goroutine of fn's: the step and
			// OnFenced wait for Do's (Tx.flushClaimStep).
			token, end, err, fenced := tx.token, time.Now(), err, c.fenced
			tx.claim.step = func() {
				if fenced != nil {
					fenced()
				}
				if tr, ok := c.st.(*tracer); ok {
					tr.stepEnded(StepClaim, token, c.n, c.h.claimStart, end, err)
				}
			}
		} else {
			c.st.step(StepClaim, tx.token, c.n, c.h.claimStart, err)
		}
	}
	if err != nil {
		return nil, err
	}
	g.rowsSeen.mark(tx.key)
	return rows, nil
}

// outcome tells what the claim's error err means for the attempt.
func (c *claiming) outcome(err error) (retry bool, _ error) {
	g, key, lctx := c.a.g, c.a.tx.key, c.lctx
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, fence.ErrNoFence):
		return false, noFenceRow{fmt.Errorf("guard: %q: claim: %w", key, err)}
	case errors.Is(err, fence.ErrStale):
		if c.a.tx.claim.deferred {
			token := c.a.tx.token
			c.fenced = func() { g.reportFenced(c.a.ctx, key, token, err) }
			return false, g.fencedErr(c.a.ctx, key, token, err)
		}
		return false, g.fenced(c.a.ctx, key, c.a.tx.token, err)
	}
	err = g.lostOr(lctx, err)
	return fence.Retryable(err) && lctx.Err() == nil, fmt.Errorf("guard: %q: claim: %w", key, err)
}
