package guard

// commit.go owns the last step of an attempt, for one caller and for a
// batch alike: commit the attempt's transaction once its work is in it (or
// commit it and chain the next caller's transaction, when relaying), settle
// a COMMIT whose reply was lost (see settle.go), and release the sql.Tx off
// the caller's path. It also owns the rollbacks of an attempt's
// transaction. It decides nothing about retries of fn.

import (
	"context"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"
)

// commit commits a once fn's work (every member's, in a batch) is in it,
// and returns what a failed COMMIT means (see commitFailed): retry says
// whether the attempt may run again. st records the commit step.
func (a *attemptTx) commit(acquired time.Time, released *chan struct{}, st stepper) (retry bool, err error) {
	g, tx := a.g, a.tx
	if g.beforeCommit != nil {
		g.beforeCommit(a.ctx, tx)
	}
	tx.finish()
	a.finished = true
	start := st.now()
	var cerr error
	a.kept, cerr = g.commitLeg(a.ctx, tx, a.lg, released)
	if cerr != nil {
		retry, err = g.commitFailed(a.ctx, tx, acquired, cerr)
		st.step(StepCommit, tx.token, tx.attempt, start, err)
		return retry, err
	}
	st.step(StepCommit, tx.token, tx.attempt, start, nil)
	g.committed(a.ctx, tx, acquired)
	return false, nil
}

// commitLeg commits stx, the transaction of lg when lg is not nil
// (relaying, unless Options.NoRelay). When another caller of key is under way here, it
// commits with COMMIT AND CHAIN and passes the new transaction on. kept
// reports that lg is taken care of: the caller must not end it.
func (g *Guard) commitLeg(ctx context.Context, tx *Tx, lg *leg, released *chan struct{}) (kept bool, err error) {
	key, stx := tx.key, tx.Tx
	switch {
	case lg != nil && g.reserve(key, lg):
		// Another caller of the key is under way here: commit and begin its
		// transaction in one round trip, and pass that on.
		next := newSessionMark()
		if err = commitSession(ctx, stx, tx.mark, next); err != nil {
			if end := g.rollbackGone(ctx, stx, tx.mark); errors.Is(err, errNotClaimingTx) {
				err = &notClaimingError{err: err, end: end}
			}
			g.unreserve(key)
			return false, err
		}
		lg.marked, lg.mark = true, next
		if lg.unbind() {
			g.passOn(ctx, key, lg, true)
		} else {
			lg.cancel() // ctx ended: database/sql rolls the new transaction back
			g.unreserve(key)
		}
		return true, nil
	case lg != nil:
		if err = g.commit(ctx, stx, tx.mark, released, lg.end); err != nil {
			lg.end()
		}
		return true, err
	default:
		return false, g.commit(ctx, stx, tx.mark, released, nil)
	}
}

// commit commits stx, returning when ctx ends even if the server or the
// network does not answer. The COMMIT is CALL redfence_commit() (see
// session.go), a statement bound to ctx: when ctx ends first, the driver closes
// the connection and the outcome is settled from the fence row. After a
// successful COMMIT the sql.Tx still has to be released, with a ROLLBACK that
// finds no transaction; that runs on a goroutine which closes *released, so
// that Do returns without waiting for it (the connection is back in the
// pool a round trip later), while a batch's runner (whose members leave
// once it has delivered) and database mode, which must hold the key until
// the connection is back, wait for it (awaitRelease). After a successful COMMIT, then (when not nil) runs once
// the sql.Tx is released.
func (g *Guard) commit(ctx context.Context, stx *sqlx.Tx, mark string, released *chan struct{}, then func()) error {
	if err := commitSession(ctx, stx, mark, ""); err != nil {
		end := g.rollbackGone(ctx, stx, mark)
		if errors.Is(err, errNotClaimingTx) {
			return &notClaimingError{err: err, end: end}
		}
		return err
	}
	done := make(chan struct{})
	*released = done
	go func() {
		defer close(done)
		_ = stx.Rollback()
		if then != nil {
			then()
		}
	}()
	return nil
}

// awaitRelease waits until a committed transaction's sql.Tx is released
// (see commit) or ctx ends. The release's ROLLBACK cannot be bound to ctx,
// and a connection that goes silent right after its COMMIT would hold it
// until the driver gives up on the connection: Do does not wait for that
// past its ctx, and the release ends in the background.
// It reports whether the release is done.
func awaitRelease(ctx context.Context, released chan struct{}) bool {
	if released == nil {
		return true
	}
	select {
	case <-released:
		return true
	case <-ctx.Done():
		return false
	}
}

// rollback rolls stx back without outliving ctx. When ctx has ended,
// database/sql rolls the transaction back and discards the connection on its
// own; otherwise the ROLLBACK is a statement bound to ctx, so a connection
// that stopped answering is closed when ctx ends.
func (g *Guard) rollback(ctx context.Context, stx *sqlx.Tx, mark string) {
	g.rollbackGone(ctx, stx, mark)
}

// rollbackGone is rollback, reporting whether the transaction that claimed
// had already ended before it (see rollbackSession). When ctx has ended,
// database/sql rolls back on its own and the server ends the session (see
// session.go); gone is then false.
func (g *Guard) rollbackGone(ctx context.Context, stx *sqlx.Tx, mark string) (end ending) {
	if ctx.Err() != nil {
		return ending{}
	}
	end, _ = rollbackSession(ctx, stx, mark)
	// Releases the sql.Tx: a ROLLBACK that finds no transaction, or nothing
	// sent on a connection closed above.
	_ = stx.Rollback()
	return end
}

func (g *Guard) committed(ctx context.Context, tx *Tx, acquired time.Time) {
	elapsed := time.Since(acquired)
	g.opt.Logger.DebugContext(ctx, "guard: committed", "key", tx.key, "token", tx.token, "attempt", tx.attempt, "elapsed", elapsed)
	if h := g.opt.Hooks.OnCommitted; h != nil {
		h(tx.key, tx.token, elapsed)
	}
}
