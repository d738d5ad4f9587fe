package guard

// guard.go owns the Guard: what New builds, and the names of fence rows.
// How a call runs starts in do.go.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/errs"
	"github.com/redfence/redfence/redislock"
)

// Guard runs critical sections: lock, fenced transaction (the lock passed on
// once the claim holds the fence row), commit. It
// is safe for concurrent use; create one per application and share it.
type Guard struct {
	locker *redislock.Locker
	db     *sqlx.DB
	opt    Options
	err    error // set by New when the Guard is unusable

	dbCheck dbCheck
	fb      *fallback  // nil unless Options.Fallback is FallbackDatabase
	batches batches    // callers combined per key (Options.MaxBatch)
	relays  relays     // connections passed between callers of a key (unless Options.NoRelay)
	calls   keyCalls   // calls of a key under way here without batching (see early.go)
	queued  queuedKeys // when calls of a key were last queued by Redis (see early.go)
	// grantTime is how long, in ns, the last lock grant that came while an
	// early transaction waited for it took (see early.go).
	grantTime atomic.Int64
	open      openTxs // keys whose transaction an attempt here has open (see spare.go)
	// rowsSeen: keys whose fence row a claim found; closedTx: a transaction
	// of the pool, rolled back, for fn's embedded *sqlx.Tx until a claim
	// that rides holds (see ride.go), and, when set, the sign that a claim
	// may carry a statement at all.
	rowsSeen seenRows
	closedTx atomic.Pointer[sqlx.Tx]
	closing  sync.Mutex // makes closedTx

	// beforeCommit, when set by tests, runs between fn and COMMIT.
	beforeCommit func(ctx context.Context, tx *Tx)
}

// New returns a Guard taking locks from locker and running transactions on
// db. opt may be nil for the defaults. New does not fail: with a nil locker,
// a nil db or invalid options every Do returns an error wrapping
// [ErrInvalidGuard] that names the problem, before touching anything.
//
// The tables Do needs are created by migrations.Apply.
func New(locker *redislock.Locker, db *sqlx.DB, opt *Options) *Guard {
	g := &Guard{locker: locker, db: db}
	var o Options
	if opt != nil {
		o = *opt
	}
	o, err := o.withDefaults()
	if err == nil && db != nil {
		o, err = o.withPool(db.Stats().MaxOpenConnections)
	}
	switch {
	case locker == nil:
		g.err = fmt.Errorf("%w: nil *redislock.Locker", ErrInvalidGuard)
	case db == nil:
		g.err = fmt.Errorf("%w: nil *sqlx.DB", ErrInvalidGuard)
	case err != nil:
		g.err = fmt.Errorf("%w: %w: %w", ErrInvalidGuard, ErrInvalidOptions, err)
	}
	if o.Namespace == "" && locker != nil && locker.Prefix() != redislock.DefaultPrefix {
		o.Namespace = locker.Prefix()
	}
	g.opt = o
	if g.err == nil && o.Fallback == FallbackDatabase {
		g.fb = newFallback(g)
	}
	return g
}

// FenceResource returns the name of key's fence row (the resource column of
// the fence table), for looking it up with fence.Lookup. Without a namespace
// it is key itself. With one it is Options.Namespace + "{" + key, or, when
// that would exceed fence.MaxResourceLen bytes, Options.Namespace + "}" and
// the hex SHA-256 of key. The namespace holds no brace, so the character
// after it tells the two forms apart and no two keys share a row.
func (g *Guard) FenceResource(key string) string {
	if g == nil || g.opt.Namespace == "" {
		return key
	}
	ns := g.opt.Namespace
	if len(ns)+1+len(key) <= fence.MaxResourceLen {
		return ns + "{" + key
	}
	sum := sha256.Sum256([]byte(key))
	return ns + "}" + hex.EncodeToString(sum[:])
}

// resource is FenceResource for a Guard known to be usable.
func (g *Guard) resource(key string) string { return g.FenceResource(key) }

func (g *Guard) usable() error {
	switch {
	case g == nil:
		return fmt.Errorf("%w: nil *Guard", ErrInvalidGuard)
	case g.err != nil:
		return g.err
	case g.locker == nil || g.db == nil:
		return fmt.Errorf("%w: not created by guard.New", ErrInvalidGuard)
	}
	return nil
}

// fenced handles a claim the database rejected: raise the key's
// token floor in Redis to the database's token so the next acquisition gets
// a token the database accepts, and report.
//
// When the claim was rejected but the current token could not be read
// (claimErr is not a *fence.StaleError), current is reported as 0 and the
// floor is left alone.
func (g *Guard) fenced(ctx context.Context, key string, token uint64, claimErr error) error {
	g.reportFenced(ctx, key, token, claimErr)
	return g.fencedErr(ctx, key, token, claimErr)
}

// reportFenced logs a stale token and calls OnFenced.
func (g *Guard) reportFenced(ctx context.Context, key string, token uint64, claimErr error) {
	current := staleCurrent(claimErr)
	g.opt.Logger.WarnContext(ctx, "guard: token fenced by the database", "key", key, "token", token, "current", current)
	if h := g.opt.Hooks.OnFenced; h != nil {
		h(key, token, current)
	}
}

// staleCurrent is the token a stale claim found, or 0.
func staleCurrent(claimErr error) uint64 {
	var stale *fence.StaleError
	if errors.As(claimErr, &stale) {
		return stale.Current
	}
	return 0
}

// fencedErr is the error of a stale claim, after the Locker's token floor
// was raised to the token the fence row holds.
func (g *Guard) fencedErr(ctx context.Context, key string, token uint64, claimErr error) error {
	current := staleCurrent(claimErr)
	err := fmt.Errorf("%w: %w", ErrFenced, claimErr)
	if current == 0 {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opt.UnlockTimeout)
	defer cancel()
	if rerr := g.locker.RaiseTokenFloor(rctx, key, current); rerr != nil {
		return errs.Join(err, fmt.Errorf("guard: raise token floor of %q to %d: %w", key, current, rerr))
	}
	return err
}

// newOpID returns a random operation id for one attempt's claim.
func newOpID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
