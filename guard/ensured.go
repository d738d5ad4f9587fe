package guard

import (
	"context"
	"fmt"
	"sync"

	"github.com/redfence/redfence/fence"
)

// noFenceRow is the error of an attempt whose claim (fence.ClaimExisting)
// found no fence row for its key, and which rolled back: the row must be
// made (makeRow) before the attempt runs again. It wraps fence.ErrNoFence.
type noFenceRow struct{ error }

func (e noFenceRow) Unwrap() error { return e.error }

// makeRow handles an attempt that found no fence row for key (nr): it makes
// the row with fence.Ensure, on the pool, outside any transaction that
// claims it. A claim that created the row inside a transaction which then
// rolled back could deadlock other transactions waiting for the same new
// row (see fence.Ensure), so Do claims with fence.ClaimExisting, which
// creates nothing, and comes here when the row is missing: once per key,
// ever. err nil means: run the same attempt again, which is not a failed
// attempt the first time in a Do (*made records it). Otherwise err is the
// attempt's failure and retry whether a new attempt may follow: Ensure
// failed (the next attempt makes the row again), or the row was missing
// again after it was made.
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

// maxEnsured bounds the set of keys a Guard remembers as having a fence row;
// past it the set starts over, which costs one more read per key.
const maxEnsured = 4096

// ensured remembers which keys' fence rows this Guard has seen to exist, so
// that in database mode (Options.Fallback), where the claim
// (fence.ClaimNext) would create a missing row, only the first Do on a key
// pays for fence.Ensure. With a lock, Do claims with fence.ClaimExisting
// and needs no such read.
type ensured struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// ensure makes sure key's fence row exists before a transaction claims it,
// outside that transaction: a first claim that rolls back would otherwise
// make other transactions waiting on the same new row deadlock (see
// fence.Ensure). It runs on the pool, before any transaction is begun.
func (g *Guard) ensure(ctx context.Context, key string) error {
	e := &g.ensured
	e.mu.Lock()
	_, ok := e.keys[key]
	e.mu.Unlock()
	if ok {
		return nil
	}
	if err := fence.Ensure(ctx, g.db, key); err != nil {
		return fmt.Errorf("guard: %q: %w", key, err)
	}
	e.mu.Lock()
	if e.keys == nil || len(e.keys) >= maxEnsured {
		e.keys = make(map[string]struct{})
	}
	e.keys[key] = struct{}{}
	e.mu.Unlock()
	return nil
}
