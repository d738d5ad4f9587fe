package guard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

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
var errUnsettled = errors.New("a newer token has claimed the key since")

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
	default:
		return false, fmt.Errorf("%w (token %d, ours %d)", errUnsettled, f.Token, tx.token)
	}
}
