package guard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

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
	fb      *fallback // nil unless Options.Fallback is FallbackDatabase
	batches batches   // callers combined per key (Options.MaxBatch)
	relays  relays    // connections passed between callers of a key (unless Options.NoRelay)
	open    openTxs   // keys whose transaction an attempt here has open (see spare.go)

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

// Do runs fn as a critical section for key, in this order:
//
//  1. lock key in Redis, waiting in FIFO order behind earlier callers
//     without holding a database connection;
//  2. begin a transaction on the Guard's DB;
//  3. claim key's fence row with the lock's token as the first statement
//     (a stale token returns [ErrFenced] without calling fn);
//  4. unlock, passing the lock on to the key's next waiter, whose claim now
//     waits for this transaction's end (Options.HandOff; with HandOffAtEnd,
//     and on a Galera pool, the unlock comes after step 6 instead);
//  5. run fn with the transaction;
//  6. commit when fn returns nil, roll back when it returns an error or
//     panics (the panic continues after cleanup).
//
// The unlock runs on every path, with a fresh context bounded by
// Options.UnlockTimeout.
//
// ctx governs the wait for the lock and the transaction, COMMIT and ROLLBACK
// included: when it ends, Do gives up waiting or rolls back, closing a
// database connection that does not answer. Do returns by the time ctx ends
// even when Redis or MySQL does not answer (when ctx ends during COMMIT,
// after settling the outcome for at most about a second more). The ctx fn
// receives additionally ends as soon as the transaction is lost, or, when
// the lock is held until the transaction ends (HandOffAtEnd), as soon as the
// lock is lost; pass it to every statement. When the lock is lost after fn
// returned nil, Do still commits (see the package documentation for why that
// is safe).
//
// fn may run more than once: when a statement of the transaction fails with
// a deadlock, a lock wait timeout or a lost connection (and fn returns that
// error or nil), or the connection is lost before COMMIT, Do rolls back and
// retries the whole transaction, claiming the fence row again, with
// jittered exponential backoff, up to Options.MaxAttempts attempts while ctx
// lasts: under a new turn of the lock and a new token when the lock was
// handed on at the claim (the default), under the same lock and token when
// the attempt failed before that or with HandOffAtEnd. Errors of fn's own making are
// returned as they are, never retried.
//
// fn must not end the transaction: see [Tx] and [ErrImplicitCommit].
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
// [ErrImplicitCommit], [ErrReentry], [ErrNestedPool], [ErrUnsafePool], or an error of the lock
// or the database. Input errors
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
	if err := g.checkKey(key); err != nil {
		return err
	}
	if s := heldScope(ctx, key); s != nil {
		return g.join(ctx, s, fn)
	}
	if err := g.checkPool(ctx, key); err != nil {
		return err
	}
	tr, ctx := g.newTracer(ctx, key)
	if ctx.Err() != nil {
		err := context.Cause(ctx)
		tr.done(err)
		return err
	}
	if err := g.checkDatabase(ctx); err != nil {
		tr.done(err)
		return err
	}
	var err error
	if g.opt.MaxBatch > 1 {
		err = g.batched(ctx, key, fn, tr)
	} else {
		if g.relaying() {
			g.relays.enter(key)
			defer g.leaveRelay(ctx, key)
		}
		err = g.run(ctx, key, fn, tr)
	}
	tr.done(err)
	return err
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

func (g *Guard) checkKey(key string) error {
	if err := redislock.ValidateKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// run holds the lock of key for the attempts of one Do. Usually one turn of
// the lock serves them all; when the lock is handed on at the claim, an attempt that
// fails after its turn was passed on takes a new turn for the next one.
func (g *Guard) run(ctx context.Context, key string, fn func(context.Context, *Tx) error, tr *tracer) error {
	// A committed transaction's connection is released while the lock is
	// released (see commit); Do returns after both.
	var released chan struct{}
	defer func() { awaitRelease(ctx, released) }()
	for first := 1; ; {
		start := time.Now()
		// Lock returns by the time ctx ends even when Redis does not answer,
		// and passes on a grant that raced with the end of ctx.
		var lk *redislock.Lock
		var err error
		if g.fb != nil {
			lk, err = g.fb.lock(ctx, key)
			if err != nil && ctx.Err() == nil && (errors.Is(err, errUseDatabase) || redisFailure(err)) {
				g.opt.Logger.DebugContext(ctx, "guard: Redis unavailable for this call", "key", key, "err", err)
				return g.runDB(ctx, key, fn, tr)
			}
		} else {
			lk, err = g.locker.Lock(ctx, key)
		}
		if err != nil {
			err = fmt.Errorf("guard: lock %q: %w", key, err)
			tr.step(StepLock, 0, 0, start, err)
			return err
		}
		again, err := g.hold(ctx, key, lk, start, first, fn, &released, tr)
		if again == 0 {
			return err
		}
		if serr := sleep(ctx, backoff(again-1, g.opt.BackoffMin, g.opt.BackoffMax, jitter())); serr != nil {
			return errs.Join(err, serr)
		}
		first = again
	}
}

// hold runs attempts from number first under one turn of the lock lk,
// granted after waiting since start, and unlocks. again is the number of the
// next attempt when one must run under a new turn (the lock was handed on at
// the claim, see handOff), 0 when the Do is over.
func (g *Guard) hold(ctx context.Context, key string, lk *redislock.Lock, start time.Time, first int,
	fn func(context.Context, *Tx) error, released *chan struct{}, tr *tracer) (again int, err error) {
	log := g.opt.Logger
	tr.step(StepLock, lk.Token(), 0, start, nil)
	acquired := time.Now()
	token := lk.Token()
	log.DebugContext(ctx, "guard: lock acquired", "key", key, "token", token, "wait", acquired.Sub(start))
	if h := g.opt.Hooks.OnAcquired; h != nil {
		h(key, token, acquired.Sub(start))
	}
	lctx, detach, stop := g.watch(ctx, lk)
	var ho *handOff
	if g.handsOffAtClaim() {
		ho = newHandOff(g, lk, detach)
	}
	defer func() {
		stop()
		ustart := tr.now()
		var uerr error
		if ho.handed() {
			uerr = ho.wait()
			ustart = ho.start
		} else {
			uerr = g.unlock(ctx, lk)
		}
		tr.step(StepUnlock, token, 0, ustart, uerr)
		if uerr != nil {
			if err != nil {
				// No new turn after a failed unlock: the lock would only
				// come back when its lease expires.
				again, err = 0, errs.Join(err, uerr)
			} else {
				// Committed (or panicking): reporting the failed unlock as
				// Do's error would invite a retry that applies the work
				// twice. The lock expires with its lease.
				log.WarnContext(ctx, "guard: unlock failed; the lock expires with its lease", "key", key, "token", token, "err", uerr)
			}
		}
	}()
	w := &callWork{g: g, ctx: ctx, lctx: lctx, fn: fn, acquired: acquired, released: released, tr: tr}
	return g.attempts(ctx, lctx, holding{key: key, token: token, owner: lk.Owner(), handOff: ho}, first, w)
}

// holding is what a Do holds the key with: the lock's token and owner, or,
// in database mode, no token (each attempt's claim mints one).
type holding struct {
	key     string
	token   uint64
	owner   string
	handOff *handOff // nil unless the lock is passed on at the claim
	// claimStart is the start of the attempt's claim step, set by attempts:
	// an attempt that runs again after its claim found no fence row (see
	// makeRow) keeps the start of its first claim.
	claimStart time.Time
}

// work is what Guard.attempts runs: one caller's fn (callWork), or the
// members of a batch (batchRun).
type work interface {
	// attempt runs attempt n, holding the key with h; retry reports
	// whether a failure may be retried.
	attempt(h holding, n int) (retry bool, err error)
	// now is the time, for the start of a step (the zero time when no step
	// is recorded).
	now() time.Time
	// steps records the steps of the work still waiting for a result.
	steps() stepper
	// rerun reports (and forgets) that the attempt rolled back to run the
	// rest of the work again at once, which is not a failed attempt (a
	// batch member's error, see batchRun.turns), and whether none is left.
	rerun() (again, none bool)
}

// attempts runs w's transaction, from attempt number first, until it
// commits, fails for good, or the retries are exhausted. again is the number
// of the next attempt when it must run under a new turn of the lock, because
// this turn was handed on at the claim; 0 otherwise.
func (g *Guard) attempts(ctx, lctx context.Context, h holding, first int, w work) (again int, err error) {
	var made bool // the fence row was made once in this turn
	for n, same := first, false; ; n++ {
		if !same {
			h.claimStart = w.now()
		}
		retry, err := w.attempt(h, n)
		same = false
		if nr := (noFenceRow{}); errors.As(err, &nr) {
			retry, err = g.makeRow(lctx, h.key, nr, &made)
			if err == nil {
				// The same attempt, claiming again; its claim step counts
				// from the first claim, making the row included.
				n--
				same = true
				continue
			}
			w.steps().step(StepClaim, h.token, n, h.claimStart, err)
		}
		if rerun, none := w.rerun(); rerun {
			switch {
			case none:
				return 0, nil
			case h.handOff.handed():
				// The next holder may have claimed the row meanwhile.
				return n, nil
			}
			n--
			continue
		}
		if err == nil || !retry {
			if err != nil && g.againAfterFence(ctx, h, n, err) {
				return n + 1, err
			}
			return 0, err
		}
		if n >= g.opt.MaxAttempts {
			return 0, fmt.Errorf("guard: %q: giving up after %d attempts: %w", h.key, n, err)
		}
		g.opt.Logger.WarnContext(ctx, "guard: retrying transaction", "key", h.key, "token", h.token, "attempt", n, "err", err)
		if hook := g.opt.Hooks.OnRetry; hook != nil {
			hook(h.key, n, err)
		}
		if h.handOff.handed() {
			// The lock is on its way to the next holder, whose claim may
			// already have taken the fence row: the same token would now be
			// fenced, and no lock would keep fn apart from the next holder's.
			// The next attempt waits for a new turn and token.
			return n + 1, err
		}
		if serr := sleep(lctx, backoff(n, g.opt.BackoffMin, g.opt.BackoffMax, jitter())); serr != nil {
			return 0, errs.Join(err, g.lostOr(lctx, serr))
		}
	}
}

// callWork is the work of one caller's Do: its fn.
type callWork struct {
	g         *Guard
	ctx, lctx context.Context
	fn        func(context.Context, *Tx) error
	acquired  time.Time
	released  *chan struct{}
	tr        *tracer
}

func (c *callWork) attempt(h holding, n int) (bool, error) {
	return c.g.attempt(c.ctx, c.lctx, h, n, c.acquired, c.fn, c.released, c.tr)
}
func (c *callWork) now() time.Time            { return c.tr.now() }
func (c *callWork) steps() stepper            { return c.tr }
func (c *callWork) rerun() (again, none bool) { return false, false }

// watch returns the ctx for fn: ctx, also cancelled as soon as lk is lost.
// detach ends the watch and leaves lctx alone, for a lock handed on at the
// claim; stop ends it and cancels lctx. Both return once the OnLost hook,
// if it fired, has returned.
func (g *Guard) watch(ctx context.Context, lk *redislock.Lock) (lctx context.Context, detach, stop func()) {
	lctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	detached := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-lctx.Done():
		case <-detached:
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
	var once sync.Once
	detach = func() {
		once.Do(func() { close(detached) })
		<-done
	}
	return lctx, detach, func() {
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
//
// After a successful COMMIT, the sql.Tx is released on a goroutine (a
// ROLLBACK that finds no transaction, see commit) so that the unlock need not
// wait for it; *released is closed when that is done.
func (g *Guard) attempt(ctx, lctx context.Context, h holding, n int, acquired time.Time,
	fn func(context.Context, *Tx) error, released *chan struct{}, tr *tracer) (retry bool, err error) {
	a, retry, err := g.claim(ctx, lctx, h, n, tr)
	if a == nil {
		return retry, err
	}
	defer a.close()
	tx := a.tx
	fctx := lctx
	if h.handOff != nil || h.dbMode() {
		// From here the fence row's lock keeps the next holder out, so the
		// Redis lock goes to it now (in database mode there is none). What
		// ends fn's right to run is then no longer a lost lease but the end
		// of this transaction (a deadlock, a lost connection, a statement
		// that ended it): the next holder's claim goes through at once, so
		// fn's ctx ends with it.
		h.handOff.release(ctx)
		c, cancel := context.WithCancelCause(lctx)
		defer cancel(nil)
		tx.onFail = cancel
		fctx = c
	}
	ferr := g.runFn(ctx, lctx, fctx, a, fn, tr)
	if f := tx.failure(); f != nil {
		// A statement of this transaction failed in a way that leaves the
		// transaction unusable. Only such failures are retried: an error of
		// fn's own making, or of another transaction (a nested Do on another
		// key), is returned as it is, whatever its class.
		switch {
		case !f.retry:
			return false, withStatementErr(f.err, ferr)
		case ferr != nil && !errors.Is(ferr, f.err):
			return false, g.lostOr(lctx, ferr)
		default:
			retry, rolledBack, perr := g.retryable(ctx, a.stx, tx, f.err)
			a.finished = a.finished || rolledBack
			if perr != nil {
				return false, perr
			}
			return retry && lctx.Err() == nil, g.lostOr(lctx, f.err)
		}
	}
	if ferr != nil {
		return g.fnFailed(ctx, lctx, a, ferr)
	}
	if err := tx.verify(ctx); err != nil { // not lctx: a lock lost now must not undo a safe commit
		f := tx.failure()
		if f != nil && f.retry {
			return lctx.Err() == nil, g.lostOr(lctx, err)
		}
		if f != nil {
			return false, err // an outcome: a lost lock must not hide it
		}
		return false, g.lostOr(lctx, err)
	}
	return a.commit(acquired, released, tr)
}

// runFn runs fn in a's transaction with fctx, and returns its error, or
// the transaction's failure when fn stopped because fctx ended with it.
func (g *Guard) runFn(ctx, lctx, fctx context.Context, a *attemptTx, fn func(context.Context, *Tx) error, tr *tracer) error {
	tx := a.tx
	sctx := withScope(fctx, &scope{g: g, key: tx.key, tx: tx})
	fstart := tr.now()
	ferr := fn(sctx, tx)
	tx.settleAfterFn(ctx, ferr)
	if f := tx.failure(); f != nil && ferr != nil && fctx != lctx &&
		errors.Is(ferr, context.Canceled) && context.Cause(fctx) == f.first && ctx.Err() == nil {
		// fn stopped because its ctx ended with the transaction.
		ferr = f.err
	}
	if tr != nil {
		serr := ferr
		if f := tx.failure(); f != nil && serr == nil {
			serr = f.err
		}
		tr.step(StepFn, tx.token, tx.attempt, fstart, serr)
	}
	return ferr
}

// fnFailed rolls a back after fn returned ferr, and tells what it means:
// fn's error, unless the claiming transaction had already ended unseen
// (see endedUnseen) or the lock was lost meanwhile.
func (g *Guard) fnFailed(ctx, lctx context.Context, a *attemptTx, ferr error) (retry bool, err error) {
	a.finished = true
	if end := g.rollbackGone(ctx, a.stx, a.tx.mark); end.gone {
		retry, err := g.endedUnseen(ctx, a.tx, ferr, end)
		return retry && lctx.Err() == nil, err
	}
	if cause := context.Cause(lctx); errors.Is(cause, ErrLockLost) {
		return false, fmt.Errorf("%w (fn: %w)", cause, ferr)
	}
	return false, ferr
}

// fenced handles a claim the database rejected: raise the key's
// token floor in Redis to the database's token so the next acquisition gets
// a token the database accepts, and report.
//
// When the claim was rejected but the current token could not be read
// (claimErr is not a *fence.StaleError), current is reported as 0 and the
// floor is left alone.
func (g *Guard) fenced(ctx context.Context, key string, token uint64, claimErr error) error {
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
