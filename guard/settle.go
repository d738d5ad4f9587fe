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

// commitFailed decides what a failed COMMIT means. A server error reply
// means the transaction did not commit (and may be retried when the error is
// retryable); anything else (a dead connection, a cancelled ctx racing the
// commit) leaves the outcome to be read from the fence row.
func (g *Guard) commitFailed(ctx context.Context, tx *Tx, acquired time.Time, cerr error) (retry bool, err error) {
	var me *mysql.MySQLError
	if errors.As(cerr, &me) && !fence.IsConnectionLost(cerr) {
		if fence.Retryable(cerr) && ctx.Err() == nil {
			return true, fmt.Errorf("guard: %q: commit: %w", tx.key, cerr)
		}
		return false, fmt.Errorf("%w: %q: commit: %w", ErrNotCommitted, tx.key, cerr)
	}
	committed, err := g.settle(ctx, tx)
	switch {
	case err != nil:
		return false, fmt.Errorf("%w: %q: commit: %w (settling: %w)", ErrOutcomeUnknown, tx.key, cerr, err)
	case committed:
		g.opt.Logger.WarnContext(ctx, "guard: commit reply lost, but the transaction committed",
			"key", tx.key, "token", tx.token, "op_id", tx.opID, "err", cerr)
		g.committed(ctx, tx, acquired)
		return false, nil
	default:
		return false, fmt.Errorf("%w: %q: commit: %w", ErrNotCommitted, tx.key, cerr)
	}
}

// errUnsettled explains why the fence row cannot tell a commit outcome.
var errUnsettled = errors.New("a newer token has claimed the key since")

// settle reads the key's fence row on a fresh connection to tell whether the
// attempt tx committed: the row carries tx's operation id if and only if it
// did, as long as no newer holder claimed the key since (Do still holds the
// lock, so only a lost lock allows that).
//
// The read runs in a SERIALIZABLE transaction, where InnoDB turns a plain
// SELECT into a shared-lock read. If the server is still running tx (the
// COMMIT in flight, or a connection whose death it has not noticed yet), tx
// holds the fence row's exclusive lock since its claim, so the read waits
// until tx has ended and then sees its final outcome, instead of an older
// committed version that would wrongly say "not committed".
func (g *Guard) settle(ctx context.Context, tx *Tx) (committed bool, err error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opt.SettleTimeout)
	defer cancel()
	rtx, err := g.db.BeginTx(sctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		return false, err
	}
	defer func() { _ = rtx.Rollback() }()
	f, err := fence.Lookup(sctx, rtx, tx.key)
	switch {
	case errors.Is(err, fence.ErrNoFence):
		return false, nil // the claim that would have created the row never committed
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
