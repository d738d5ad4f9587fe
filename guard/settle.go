package guard

// settle.go owns what a failure means: whether a transaction that failed
// may run again, and the outcome of one that ended unseen or whose COMMIT
// lost its reply, read from the fence row. It commits nothing.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
)

// commitFailed decides what a failed COMMIT means.
//
// The errors it returns name the COMMIT's own error as text only (%v): an
// outcome error is a final verdict on this Do, and must never look like a
// lost connection or a deadlock to a caller (or an enclosing Do) that
// classifies errors for a retry. A server error reply
// means the transaction did not commit (and may be retried when the error is
// retryable), except error 1180; anything else (a dead connection, a
// cancelled ctx racing the commit) leaves the outcome to be read from the
// fence row.
//
// Error 1180 (ER_ERROR_DURING_COMMIT) says the commit failed part way. A
// MariaDB Galera Cluster node returns it when it lost the primary component
// while replicating the transaction, and the write set may have reached the
// other nodes and committed there all the same. Its outcome is read from
// the fence row, like a lost connection's.
func (g *Guard) commitFailed(ctx context.Context, tx *Tx, acquired time.Time, cerr error) (retry bool, err error) {
	if nc := (*notClaimingError)(nil); errors.As(cerr, &nc) {
		return g.endedUnseen(ctx, tx, nil, nc.end)
	}
	var me *mysql.MySQLError
	if errors.As(cerr, &me) && !fence.IsConnectionLost(cerr) && me.Number != erErrorDuringCommit {
		if fence.Retryable(cerr) && ctx.Err() == nil {
			return true, fmt.Errorf("guard: %q: commit: %w", tx.key, cerr)
		}
		return false, fmt.Errorf("%w: %q: commit: %v", ErrNotCommitted, tx.key, cerr)
	}
	committed, err := g.settle(ctx, tx)
	switch {
	case err != nil:
		return false, fmt.Errorf("%w: %q: commit: %v (settling: %v)", ErrOutcomeUnknown, tx.key, cerr, err)
	case committed:
		g.opt.Logger.WarnContext(ctx, "guard: commit reply lost, but the transaction committed",
			"key", tx.key, "token", tx.token, "op_id", tx.opID, "err", cerr)
		g.committed(ctx, tx, acquired)
		return false, nil
	default:
		return false, fmt.Errorf("%w: %q: commit: %v", ErrNotCommitted, tx.key, cerr)
	}
}

// erErrorDuringCommit is ER_ERROR_DURING_COMMIT; see commitFailed.
const erErrorDuringCommit = 1180

// settleGrace bounds the outcome check after the caller's ctx ended.
const settleGrace = time.Second

// errUnsettled explains why the fence row cannot tell a commit outcome.
var errUnsettled = errors.New("two or more newer tokens have claimed the key since")

// settle reads the key's fence row on a fresh connection to tell whether the
// attempt tx committed: the row carries tx's operation id if and only if it
// did, as long as no newer holder claimed the key since (with the lock
// handed on at the claim, the next holder's claim goes through as soon as
// the server has ended tx; with HandOffAtEnd, only a lost lock allows it).
//
// The read runs in a SERIALIZABLE transaction, where InnoDB turns a plain
// SELECT into a shared-lock read. If the server is still running tx (the
// COMMIT in flight, or a connection whose death it has not noticed yet), tx
// holds the fence row's exclusive lock since its claim, so the read waits
// until tx has ended and then sees its final outcome, instead of an older
// committed version that would wrongly say "not committed".
//
// On a node of a MariaDB Galera Cluster, the fresh connection may reach
// another node than the one tx ran on (a load balancer, a DSN moved to a
// surviving node), which may not have applied tx's commit yet, and the
// row lock above does not reach across nodes. The read is therefore made
// causal first ([fence.SyncWait], one round trip; a SELECT 1 elsewhere),
// on the connection that then runs the transaction: Galera waits only for
// statements outside a transaction. It covers every commit the cluster
// had ordered when the check began; a node outside the primary component
// refuses it, and the outcome is then unknown.
//
// When the caller's ctx has already ended (the COMMIT was cut short by it),
// the check gets at most settleGrace: a transaction whose connection the
// server has not seen die holds the row until the server notices, and Do
// must not keep the caller (and the key's lock) waiting for that.
func (g *Guard) settle(ctx context.Context, tx *Tx) (committed bool, err error) {
	timeout := g.opt.SettleTimeout
	if ctx.Err() != nil {
		timeout = min(timeout, settleGrace)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	conn, err := g.db.Conn(sctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := fence.SyncWait(sctx, conn); err != nil {
		return false, err
	}
	rtx, err := conn.BeginTx(sctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		return false, err
	}
	defer func() { _ = rtx.Rollback() }()
	f, err := fence.Lookup(sctx, rtx, tx.resource)
	return claimOutcome(tx, f, err)
}

// settleEnded reads the fence row (a consistent read on the pool) to tell
// whether the claim of tx committed, once this process knows that tx's
// transaction is over: ended by the server on a statement of its own live
// session, which has since rolled back what was left. Nothing of tx can
// still commit, so there is nothing to wait for, unlike in settle: the read
// takes no lock, and so is not held up by the next holder's claim, which
// may already have taken the row.
func (g *Guard) settleEnded(ctx context.Context, tx *Tx) (committed bool, err error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opt.SettleTimeout)
	defer cancel()
	f, err := fence.Lookup(sctx, g.db.DB, tx.resource)
	return claimOutcome(tx, f, err)
}

// claimOutcome tells from the fence row f (read with err) whether the claim
// of tx committed; see settle.
func claimOutcome(tx *Tx, f fence.Fence, err error) (committed bool, _ error) {
	switch {
	case errors.Is(err, fence.ErrNoFence):
		return false, nil // no row, so no claim on it, and no commit, landed
	case err != nil:
		return false, err
	case f.OpID == tx.opID:
		return true, nil
	case f.Token <= tx.token:
		// The row still holds this Do's token (or an older one) under another
		// operation id: this attempt's claim, and so its commit, did not land.
		return false, nil
	case f.PrevOpID == tx.opID:
		// The claim after this attempt's replaced it: it had committed.
		return true, nil
	case f.PrevToken < tx.token:
		// The claim after this attempt's replaced an older token: this
		// attempt's claim was not in the row, so it did not commit. (Had
		// it committed, every later claim would follow it, and the first
		// of them would name it.)
		return false, nil
	default:
		return false, fmt.Errorf("%w (token %d, previous %d, ours %d)", errUnsettled, f.Token, f.PrevToken, tx.token)
	}
}

// endedUnseen decides what an attempt means whose claiming transaction
// ended before Do's COMMIT or ROLLBACK, unseen by Tx (see session.go): fn's
// statements after that end ran in another transaction, which Do has rolled
// back, so none of them committed, unless fn switched autocommit back on
// (end.autocommit). The fence row tells what became of the claiming
// transaction:
//   - it committed (a statement committed it implicitly): the work fn did
//     up to that statement is applied, the rest is not; ErrImplicitCommit,
//     never retried;
//   - it was rolled back (a deadlock or another error that rolled back the
//     whole transaction and reached fn only, or not at all): nothing of the
//     attempt applied, and running it again is safe when fn returned nil or
//     a retryable error (fnErr); but when fn had switched autocommit on,
//     what it ran after the rollback may have committed on its own:
//     ErrOutcomeUnknown, never retried;
//   - it cannot tell (two newer holders have claimed the row since):
//     ErrOutcomeUnknown.
func (g *Guard) endedUnseen(ctx context.Context, tx *Tx, fnErr error, end ending) (retry bool, err error) {
	committed, serr := g.settleEnded(ctx, tx)
	after := "what fn did after that was rolled back"
	if end.autocommit {
		after = "a statement of fn switched autocommit on, so what fn ran after that may have committed on its own, outside the fence"
	}
	switch {
	case serr != nil:
		return false, withStatementErr(fmt.Errorf("guard: %q: %w: %w, and the fence row cannot tell how: %v",
			tx.key, ErrOutcomeUnknown, errNotClaimingTx, serr), fnErr)
	case committed:
		return false, withStatementErr(fmt.Errorf("guard: %q: %w: %w: it committed, with the work fn did until then; %s",
			tx.key, ErrImplicitCommit, errNotClaimingTx, after), fnErr)
	case end.autocommit:
		return false, withStatementErr(fmt.Errorf("guard: %q: %w: %w: the server rolled it back; %s",
			tx.key, ErrOutcomeUnknown, errNotClaimingTx, after), fnErr)
	case fnErr != nil && !fence.Retryable(fnErr):
		return false, fnErr
	default:
		return ctx.Err() == nil, withStatementErr(fmt.Errorf("guard: %q: %w: %w: the server rolled it back, and %s too",
			tx.key, ErrNotCommitted, errNotClaimingTx, after), fnErr)
	}
}

// retryable decides whether an attempt whose transaction the server rolled
// back (cause: a deadlock, a write conflict, a lock wait timeout, a lost
// connection, seen by Tx on one of fn's statements) may run again: only
// when nothing of it committed. A statement Tx did not see may have
// committed the claiming transaction before the failure (see session.go),
// so that is proven, not assumed:
//   - on a live connection, the rollback tells whether the claiming
//     transaction was still there (a lock wait timeout rolls back the
//     statement only); if it was, nothing committed;
//   - otherwise the fence row tells (endedUnseen), read on the pool once
//     the claiming transaction is over: on a lost connection after the
//     server has ended it (settle waits for that).
//
// finished reports that stx was rolled back here.
func (g *Guard) retryable(ctx context.Context, stx *sqlx.Tx, tx *Tx, cause error) (retry, finished bool, err error) {
	if fence.IsConnectionLost(cause) {
		committed, serr := g.settle(ctx, tx)
		switch {
		case serr != nil:
			return false, false, withStatementErr(fmt.Errorf("guard: %q: %w: the connection was lost during fn, "+
				"and the fence row cannot tell whether a statement fn ran committed the transaction: %v",
				tx.key, ErrOutcomeUnknown, serr), cause)
		case committed:
			return false, false, withStatementErr(fmt.Errorf("guard: %q: %w: %w: it committed before the connection was lost",
				tx.key, ErrImplicitCommit, errNotClaimingTx), cause)
		}
		return ctx.Err() == nil, false, nil
	}
	end := g.rollbackGone(ctx, stx, tx.mark)
	if !end.gone {
		return ctx.Err() == nil, true, nil
	}
	retry, err = g.endedUnseen(ctx, tx, nil, end)
	if retry {
		return retry, true, nil
	}
	return false, true, err
}

// retryable is Guard.retryable for a's transaction, which failed with
// cause; a is marked finished when it was rolled back there.
func (a *attemptTx) retryable(cause error) (retry bool, err error) {
	retry, finished, err := a.g.retryable(a.ctx, a.stx, a.tx, cause)
	a.finished = a.finished || finished
	return retry, err
}
