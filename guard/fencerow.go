package guard

// fencerow.go owns the making of a key's fence row, outside the
// transaction that claims it, when the claim found none.

import (
	"context"
	"fmt"

	"github.com/redfence/redfence/fence"
)

// noFenceRow is the error of an attempt whose claim (fence.ClaimExisting,
// or fence.ClaimNextExisting in database mode) found no fence row for its
// key, and which rolled back: the row must be made (makeRow) before the
// attempt runs again. It wraps fence.ErrNoFence.
type noFenceRow struct{ error }

func (e noFenceRow) Unwrap() error { return e.error }

// makeRow handles an attempt that found no fence row for key (nr): it makes
// the row with fence.Ensure, on the pool, outside any transaction that
// claims it. A claim that created the row inside a transaction which then
// rolled back could deadlock other transactions waiting for the same new
// row (see fence.Ensure), so Do claims with statements that create nothing,
// and comes here when the row is missing: with a lock, once per key (the
// lock keeps the key's other callers out meanwhile); in database mode, once
// per caller that found the row missing. err nil means: run the same
// attempt again, which is not a failed attempt the first time in a turn
// (*made records it). Otherwise err is the attempt's failure and retry
// whether a new attempt may follow: Ensure failed (the next attempt makes
// the row again), or the row was missing again after it was made.
func (g *Guard) makeRow(ctx context.Context, key string, nr noFenceRow, made *bool) (retry bool, err error) {
	if err := fence.Ensure(ctx, g.db, g.resource(key)); err != nil {
		err = g.lostOr(ctx, err)
		return fence.Retryable(err) && ctx.Err() == nil, fmt.Errorf("guard: %q: %w", key, err)
	}
	if *made {
		return ctx.Err() == nil, nr.error
	}
	*made = true
	return false, nil
}
