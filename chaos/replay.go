package chaos

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
)

// ReplayBuy is the token-replay fault: a clone of a holder (a process
// restored from the holder's snapshot, a retry worker handed its lock, a
// second replica of a job) writes with a fencing token it observed rather
// than one it was granted. It runs a buy of qty units of item, recorded
// under opID, in a transaction of its own on db whose first statement claims
// the fence row resource with token, under the clone's own owner and the
// claim operation id "replay-" + opID, exactly as guard would. Nothing of the
// lock is consulted.
//
// The fence must accept the clone only if nobody presented token before it:
// a token equal to the stored one from another owner is stale. ReplayBuy
// returns nil when the buy committed, an error wrapping [fence.ErrStale]
// when the claim was refused, [ErrSoldOut], or the error of the failing
// statement (then nothing was committed unless it was the COMMIT).
func ReplayBuy(ctx context.Context, db *sqlx.DB, resource, item, opID string, qty int, token uint64, owner string) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("chaos: replay: begin: %w", err)
	}
	fenceOp := "replay-" + opID
	err = fence.ClaimOp(ctx, tx, resource, token, owner, fenceOp)
	if err == nil {
		err = buyIn(ctx, tx, item, opID, qty, token, fenceOp, nil)
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("chaos: replay: commit: %w", err)
	}
	return nil
}
