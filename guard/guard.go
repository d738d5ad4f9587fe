package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/redislock"
)

// Guard runs critical sections: lock, fenced transaction, commit, unlock. It
// is safe for concurrent use; create one per application and share it.
type Guard struct {
	locker *redislock.Locker
	db     *sqlx.DB
	opt    Options
	err    error // set by New when the Guard is unusable

	ensured ensured

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
	switch {
	case locker == nil:
		g.err = fmt.Errorf("%w: nil *redislock.Locker", ErrInvalidGuard)
	case db == nil:
		g.err = fmt.Errorf("%w: nil *sqlx.DB", ErrInvalidGuard)
	case err != nil:
		g.err = fmt.Errorf("%w: %w: %s", ErrInvalidGuard, ErrInvalidOptions, err.Error())
	}
	g.opt = o
	return g
}

// Do runs fn as a critical section for key, in this order:
//
//  1. lock key in Redis, waiting in FIFO order behind earlier callers
//     without holding a database connection;
//  2. begin a transaction on the Guard's DB;
//  3. claim key's fence row with the lock's token as the first statement
//     (a stale token returns [ErrFenced] without calling fn);
//  4. run fn with the transaction;
//  5. commit when fn returns nil, roll back when it returns an error or
//     panics (the panic continues after cleanup);
//  6. unlock, on every path, with a fresh context bounded by
//     Options.UnlockTimeout.
//
// ctx governs the wait for the lock and the transaction: when it ends, Do
// gives up waiting or rolls back. Do returns by the time ctx ends even when
// Redis does not answer. The ctx fn receives additionally ends as
// soon as the lock is lost; pass it to every statement. When the lock is lost
// after fn returned nil, Do still commits (see the package documentation for
// why that is safe).
//
// fn may run more than once: deadlocks, lock wait timeouts and connections
// lost before COMMIT roll back and retry the whole transaction under the
// same lock and token, with jittered exponential backoff, up to
// Options.MaxAttempts attempts while ctx lasts.
//
// If the connection dies during COMMIT, Do reads the fence row on a fresh
// connection: nil if the commit happened, [ErrNotCommitted] if it did not,
// [ErrOutcomeUnknown] if that cannot be told. Do never applies fn twice
// silently.
//
// Called inside fn with fn's ctx on the same key, Do joins the outer
// transaction (see the package documentation on nesting).
//
// Do returns nil exactly when the transaction committed; otherwise fn's
// error (wrapped when retries were exhausted) or one describing the failed
// step: [ErrFenced], [ErrLockLost], [ErrNotCommitted], [ErrOutcomeUnknown],
// [ErrReentry], or an error of the lock or the database. Input errors
// ([ErrNilContext], [ErrNilFunc], [ErrInvalidKey], [ErrInvalidGuard]) come
// back before anything is touched.
func (g *Guard) Do(ctx context.Context, key string, fn func(ctx context.Context, tx *Tx) error) error {
	if err := g.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return ErrNilContext
	}
	if fn == nil {
		return ErrNilFunc
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if s := heldScope(ctx, key); s != nil {
		return g.join(ctx, s, fn)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return g.run(ctx, key, fn)
}

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

func checkKey(key string) error {
	if err := redislock.ValidateKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// run holds the lock of key for the attempts of one Do.
func (g *Guard) run(ctx context.Context, key string, fn func(context.Context, *Tx) error) (err error) {
	log := g.opt.Logger
	start := time.Now()
	// Lock returns by the time ctx ends even when Redis does not answer, and
	// passes on a grant that raced with the end of ctx.
	lk, err := g.locker.Lock(ctx, key)
	if err != nil {
		return fmt.Errorf("guard: lock %q: %w", key, err)
	}
	acquired := time.Now()
	token := lk.Token()
	log.DebugContext(ctx, "guard: lock acquired", "key", key, "token", token, "wait", acquired.Sub(start))
	if h := g.opt.Hooks.OnAcquired; h != nil {
		h(key, token, acquired.Sub(start))
	}
	defer func() {
		if uerr := g.unlock(ctx, lk); uerr != nil {
			if err != nil {
				err = errors.Join(err, uerr)
			} else {
				// Committed (or panicking): reporting the failed unlock as
				// Do's error would invite a retry that applies the work
				// twice. The lock expires with its lease.
				log.WarnContext(ctx, "guard: unlock failed; the lock expires with its lease", "key", key, "token", token, "err", uerr)
			}
		}
	}()

	lctx, stop := g.watch(ctx, lk)
	defer stop()

	for attempt := 1; ; attempt++ {
		retry, err := g.attempt(ctx, lctx, lk, attempt, acquired, fn)
		if err == nil || !retry {
			return err
		}
		if attempt >= g.opt.MaxAttempts {
			return fmt.Errorf("guard: %q: giving up after %d attempts: %w", key, attempt, err)
		}
		log.WarnContext(ctx, "guard: retrying transaction", "key", key, "token", token, "attempt", attempt, "err", err)
		if h := g.opt.Hooks.OnRetry; h != nil {
			h(key, attempt, err)
		}
		if serr := sleep(lctx, backoff(attempt, g.opt.BackoffMin, g.opt.BackoffMax, jitter())); serr != nil {
			return errors.Join(err, g.lostOr(lctx, serr))
		}
	}
}

// watch returns the ctx for fn: ctx, also cancelled as soon as lk is lost.
// stop ends the watch and returns once the OnLost hook, if it fired, has
// returned.
func (g *Guard) watch(ctx context.Context, lk *redislock.Lock) (context.Context, func()) {
	lctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-lctx.Done():
		case <-lk.Done():
			cause := lk.Err()
			if cause == nil {
				cause = redislock.ErrLost
			}
			cancel(fmt.Errorf("%w: %q: %w", ErrLockLost, lk.Key(), cause))
			g.opt.Logger.WarnContext(ctx, "guard: lock lost", "key", lk.Key(), "token", lk.Token(), "err", cause)
			if h := g.opt.Hooks.OnLost; h != nil {
				h(lk.Key(), lk.Token())
			}
		}
	}()
	return lctx, func() {
		cancel(context.Canceled)
		<-done
	}
}

// lostOr returns the lock-loss error when lctx ended because the lock was
// lost, err otherwise.
func (g *Guard) lostOr(lctx context.Context, err error) error {
	if cause := context.Cause(lctx); errors.Is(cause, ErrLockLost) {
		return cause
	}
	return err
}

func (g *Guard) unlock(ctx context.Context, lk *redislock.Lock) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opt.UnlockTimeout)
	defer cancel()
	err := lk.Unlock(uctx)
	if err == nil || errors.Is(err, redislock.ErrNotHeld) || errors.Is(err, redislock.ErrLost) {
		// A lock lost meanwhile needs no release; the loss was reported.
		return nil
	}
	return fmt.Errorf("guard: unlock %q: %w", lk.Key(), err)
}

// attempt runs one transaction. retry reports whether a failure may be
// retried under the same lock.
func (g *Guard) attempt(ctx, lctx context.Context, lk *redislock.Lock, n int, acquired time.Time,
	fn func(context.Context, *Tx) error) (retry bool, err error) {
	key, token := lk.Key(), lk.Token()
	if lctx.Err() != nil {
		return false, g.lostOr(lctx, context.Cause(lctx))
	}
	if err := g.ensure(lctx, key); err != nil {
		err = g.lostOr(lctx, err)
		return fence.Retryable(err) && lctx.Err() == nil, err
	}
	// The transaction is bound to the caller's ctx, not to lctx: a lock lost
	// after fn returned must not roll back a commit that is safe to make.
	stx, err := g.db.BeginTxx(ctx, g.opt.TxOptions)
	if err != nil {
		return fence.Retryable(err) && lctx.Err() == nil, fmt.Errorf("guard: %q: begin: %w", key, err)
	}
	tx := &Tx{Tx: stx, key: key, token: token, owner: lk.Owner(), opID: newOpID(), attempt: n}
	finished := false
	defer func() {
		if !finished {
			// Runs on errors and panics alike; a dead connection or a
			// transaction already rolled back by its ctx answers with an
			// error that changes nothing.
			_ = stx.Rollback()
		}
	}()

	if err := fence.ClaimOp(lctx, stx, key, token, tx.owner, tx.opID); err != nil {
		if errors.Is(err, fence.ErrStale) {
			return false, g.fenced(ctx, stx, key, token, err)
		}
		err = g.lostOr(lctx, err)
		return fence.Retryable(err) && lctx.Err() == nil, fmt.Errorf("guard: %q: claim: %w", key, err)
	}

	sctx := withScope(lctx, &scope{g: g, key: key, tx: tx})
	if err := fn(sctx, tx); err != nil {
		if cause := context.Cause(lctx); errors.Is(cause, ErrLockLost) {
			return false, fmt.Errorf("%w (fn: %w)", cause, err)
		}
		return fence.Retryable(err) && lctx.Err() == nil, err
	}
	if err := tx.brokenErr(); err != nil {
		return fence.Retryable(err) && lctx.Err() == nil, err
	}

	if g.beforeCommit != nil {
		g.beforeCommit(ctx, tx)
	}
	finished = true
	if err := stx.Commit(); err != nil {
		return g.commitFailed(ctx, tx, acquired, err)
	}
	g.committed(ctx, tx, acquired)
	return false, nil
}

func (g *Guard) committed(ctx context.Context, tx *Tx, acquired time.Time) {
	elapsed := time.Since(acquired)
	g.opt.Logger.DebugContext(ctx, "guard: committed", "key", tx.key, "token", tx.token, "attempt", tx.attempt, "elapsed", elapsed)
	if h := g.opt.Hooks.OnCommitted; h != nil {
		h(tx.key, tx.token, elapsed)
	}
}

// fenced handles a claim the database rejected: roll back, raise the key's
// token floor in Redis to the database's token so the next acquisition gets
// a token the database accepts, and report.
//
// When the claim was rejected but the current token could not be read
// (claimErr is not a *fence.StaleError), current is reported as 0 and the
// floor is left alone.
func (g *Guard) fenced(ctx context.Context, stx *sqlx.Tx, key string, token uint64, claimErr error) error {
	_ = stx.Rollback()
	var current uint64
	var stale *fence.StaleError
	if errors.As(claimErr, &stale) {
		current = stale.Current
	}
	g.opt.Logger.WarnContext(ctx, "guard: token fenced by the database", "key", key, "token", token, "current", current)
	if h := g.opt.Hooks.OnFenced; h != nil {
		h(key, token, current)
	}
	err := fmt.Errorf("%w: %w", ErrFenced, claimErr)
	if current == 0 {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opt.UnlockTimeout)
	defer cancel()
	if rerr := g.locker.RaiseTokenFloor(rctx, key, current); rerr != nil {
		return errors.Join(err, fmt.Errorf("guard: raise token floor of %q to %d: %w", key, current, rerr))
	}
	return err
}

// newOpID returns a random operation id for one attempt's claim.
func newOpID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
