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
	// kept: lg is taken care of (passed on or ended by the commit).
	kept bool
	// finished: committed, or rolled back.
	finished bool
	// cancel ends fn's ctx, when handOn made it.
	cancel context.CancelCauseFunc
}

// handOn passes the lock on (ho), now that the claim holds the fence row,
// and returns the ctx for fn. From here the fence row's lock keeps the next
// holder out, so the Redis lock goes to it now (in database mode, dbMode,
// there is none). What ends fn's right to run is then no longer a lost
// lease but the end of this transaction (a deadlock, a lost connection, a
// statement that ended it): the next holder's claim goes through at once,
// so fn's ctx ends with it. Without either, fn's ctx is lctx.
func (a *attemptTx) handOn(ctx, lctx context.Context, ho *handOff, dbMode bool) context.Context {
	if ho == nil && !dbMode {
		return lctx
	}
	ho.release(ctx)
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
	if !a.finished {
		a.finished = true
		a.g.rollback(a.ctx, a.stx, a.tx.mark)
	}
	a.tx.finish()
	a.g.open.leave(a.tx.key)
	if a.lg != nil && !a.kept {
		a.lg.end()
	}
}

// rollback rolls a's transaction back now.
func (a *attemptTx) rollback() {
	if !a.finished {
		a.finished = true
		a.g.rollback(a.ctx, a.stx, a.tx.mark)
	}
}

// claim begins attempt n's transaction on h.key and claims the fence row
// with h's token, or, in database mode (token 0), with a token the claim
// mints (a.tx.Token). The transaction is bound to ctx, not to lctx: a lock
// lost after fn returned must not roll back a commit that is safe to make;
// the claim itself is bound to lctx. On success the caller must close a.
// Otherwise a is nil, err is a noFenceRow when the key has no fence row
// (for makeRow), wraps ErrFenced when the token is stale, and retry says
// whether a new attempt may follow. st records the claim step.
func (g *Guard) claim(ctx, lctx context.Context, h holding, n int, st stepper) (a *attemptTx, retry bool, err error) {
	key := h.key
	token := h.token
	traced := false
	defer func() {
		if !traced {
			st.step(StepClaim, token, n, h.claimStart, err)
		}
	}()
	if lctx.Err() != nil {
		return nil, false, g.lostOr(lctx, context.Cause(lctx))
	}
	stx, lg, connID, err, ok := h.early.take()
	if !ok {
		stx, lg, connID, err = g.begin(ctx, key)
	}
	if err != nil {
		return nil, fence.Retryable(err) && lctx.Err() == nil, fmt.Errorf("guard: %q: begin: %w", key, err)
	}
	tx := newTx(stx, key, g.resource(key), token, h.owner, n)
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
	connID, err = g.claimSession(lctx, stx, tx, connID)
	token = tx.token
	if lg != nil {
		lg.connID = connID
	}
	tx.killQuery = func(ctx context.Context) func() { return g.killOnEnd(ctx, connID, settleGrace, true) }
	switch {
	case err == nil:
		traced = true
		st.step(StepClaim, token, n, h.claimStart, nil)
		return a, false, nil
	case errors.Is(err, fence.ErrNoFence):
		a.close()
		traced = true // not a failed claim: see noFenceRow
		return nil, false, noFenceRow{fmt.Errorf("guard: %q: claim: %w", key, err)}
	case errors.Is(err, fence.ErrStale):
		a.close()
		return nil, false, g.fenced(ctx, key, token, err)
	default:
		a.close()
		err = g.lostOr(lctx, err)
		return nil, fence.Retryable(err) && lctx.Err() == nil, fmt.Errorf("guard: %q: claim: %w", key, err)
	}
}
