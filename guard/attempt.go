package guard

// attempt.go owns the attempts under one turn: the retry loop (attempts)
// and the one attempt path (attempt): claim (claim.go), hand-on, the
// work's fns, the check of the transaction, commit (commit.go). One
// caller's Do, a batch (batch_run.go) and database mode all run through
// both, as a work value whose methods are the steps in which they differ;
// one caller's work (callWork) is here. What a failure means is decided in
// settle.go; the loop retries only what it is told it may.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redfence/redfence/internal/errs"
	"github.com/redfence/redfence/redislock"
)

// work is what Guard.attempts runs: one caller's fn (callWork, below), or
// the members of a batch (batchRun, batch_run.go). Guard.attempt runs an
// attempt of either; these methods are the steps in which they differ.
type work interface {
	// begin starts an attempt under h: how its claim is sent, and the
	// steps to record. ok is false when no part of the work is left.
	begin(h *holding) (p plan, ok bool)
	// run runs the work's fns in a's transaction, with fctx. done says
	// that the attempt ended there, with retry and err; otherwise the work
	// is in the transaction, for the check and the COMMIT.
	run(a *attemptTx, n int, fctx context.Context) (done, retry bool, err error)
	// rolledBack records that the transaction the work ran in was rolled
	// back by the server, to be run again.
	rolledBack()
	// commit commits a and tells what the outcome means for the attempt.
	commit(a *attemptTx) (retry bool, err error)
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

// plan is how an attempt of a work begins (work.begin).
type plan struct {
	st      stepper
	ride    bool  // the claim rides with fn's first statement (ride.go)
	afterFn bool  // the lock is passed on once fn has returned, not at the claim
	first   *Read // the read the claim carries (DoRead), or nil
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
		retry, err := g.attempt(ctx, lctx, h, n, w)
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
	key       string
	fn        func(context.Context, *Tx) error
	first     *Read // the Read fn begins with (DoRead), or nil
	acquired  time.Time
	released  *chan struct{}
	tr        *tracer
	// early is the transaction begun while the first lock request was in
	// flight (see early.go), or nil.
	early *early
}

func (c *callWork) lockOptions(n int) []redislock.LockOption {
	if n > 0 {
		return nil
	}
	if c.early = c.g.beginEarly(c.ctx, c.key); c.early == nil {
		return nil
	}
	return []redislock.LockOption{redislock.WithQueued(c.early.queuedBack)}
}

func (c *callWork) hold(lctx context.Context, _ *handOff, _ int) { c.lctx = lctx }

func (c *callWork) granted(lk *redislock.Lock, start time.Time, _ int) {
	c.tr.step(StepLock, lk.Token(), 0, start, nil)
	c.acquired = time.Now()
	wait := c.acquired.Sub(start)
	c.early.granted(wait)
	c.g.opt.Logger.DebugContext(c.ctx, "guard: lock acquired", "key", c.key, "token", lk.Token(), "wait", wait)
	if h := c.g.opt.Hooks.OnAcquired; h != nil {
		h(c.key, lk.Token(), wait)
	}
}

func (c *callWork) notGranted(start time.Time, useDB bool, err error) error {
	c.early.giveBack()
	if useDB {
		c.g.opt.Logger.DebugContext(c.ctx, "guard: Redis unavailable for this call", "key", c.key, "err", err)
		return c.g.runDB(c.ctx, c.key, c.fn, c.tr)
	}
	err = fmt.Errorf("guard: lock %q: %w", c.key, err)
	c.tr.step(StepLock, 0, 0, start, err)
	return err
}

func (c *callWork) ended(_ int, err error) error {
	c.early.giveBack() // not taken: the first attempt never began
	return err
}

func (c *callWork) unlocked(token uint64, start time.Time, err error) {
	c.tr.step(StepUnlock, token, 0, start, err)
}

func (c *callWork) begin(h *holding) (plan, bool) {
	h.early = c.early
	return plan{st: c.tr, ride: c.g.rides(*h), afterFn: c.g.ridesOn(), first: c.first}, true
}

// run runs fn, and ends the attempt unless fn's work is in the
// transaction, ready to commit.
func (c *callWork) run(a *attemptTx, _ int, fctx context.Context) (done, retry bool, err error) {
	g, ctx, lctx, tx := c.g, c.ctx, c.lctx, a.tx
	ferr := g.runFn(ctx, lctx, fctx, a, c.fn, c.tr)
	if tx.claimPending() && ferr == nil {
		_ = tx.sendClaim(lctx) // fn sent no statement the claim could ride with
		tx.flushClaimStep()
	}
	if retry, err := tx.claimFailure(); err != nil {
		return true, retry, err
	}
	if ferr == nil && tx.failure() == nil {
		a.handOnAfterFn()
	}
	if f := tx.failure(); f != nil {
		retry, err = g.txFailed(lctx, a, f, ferr)
		return true, retry, err
	}
	if ferr != nil {
		retry, err = g.fnFailed(ctx, lctx, a, ferr)
		return true, retry, err
	}
	return false, false, nil
}

func (c *callWork) rolledBack() {}

func (c *callWork) commit(a *attemptTx) (bool, error) {
	return a.commit(c.acquired, c.released, c.tr)
}

func (c *callWork) now() time.Time { return c.tr.now() }

func (c *callWork) steps() stepper { return c.tr }

func (c *callWork) rerun() (again, none bool) { return false, false }

// attempt runs attempt n of w in one transaction: the claim (claim.go),
// the hand-on of the lock, w's fns, the check of the transaction and the
// COMMIT (commit.go). retry reports whether a failure may be retried under
// the same lock.
//
// After a successful COMMIT, the sql.Tx is released on a goroutine (a
// ROLLBACK that finds no transaction, see commit) so that the unlock need not
// wait for it.
func (g *Guard) attempt(ctx, lctx context.Context, h holding, n int, w work) (retry bool, err error) {
	p, ok := w.begin(&h)
	if !ok {
		return false, nil
	}
	a, retry, err := g.claim(ctx, lctx, h, n, p.st, p.ride, p.first)
	if a == nil {
		return retry, err
	}
	defer a.close()
	ho := h.handOff
	if ho.handed() {
		ho = nil // handed on in an earlier attempt of this turn
	}
	fctx := a.handOn(ctx, lctx, ho, h.dbMode(), p.afterFn)
	if done, retry, err := w.run(a, n, fctx); done {
		return retry, err
	}
	if err := a.tx.verify(ctx); err != nil { // not lctx: a lock lost now must not undo a safe commit
		// Rolled back before the decision, so that a lock lost meanwhile is
		// seen by it.
		a.rollback()
		f := a.tx.failure()
		switch {
		case f != nil && f.retry:
			w.rolledBack()
			return lctx.Err() == nil, g.lostOr(lctx, err)
		case f != nil:
			return false, err // an outcome: a lost lock must not hide it
		}
		return false, g.lostOr(lctx, err)
	}
	return w.commit(a)
}

// txFailed tells what f, a failure of a's transaction, means after fn
// returned ferr. Only a failure that leaves the transaction unusable is
// retried: an error of fn's own making, or of another transaction (a
// nested Do on another key), is returned as it is, whatever its class.
func (g *Guard) txFailed(lctx context.Context, a *attemptTx, f *txFailure, ferr error) (retry bool, err error) {
	switch {
	case !f.retry:
		return false, withStatementErr(f.err, ferr)
	case ferr != nil && !errors.Is(ferr, f.err):
		return false, g.lostOr(lctx, ferr)
	}
	retry, perr := a.retryable(f.err)
	if perr != nil {
		return false, perr
	}
	return retry && lctx.Err() == nil, g.lostOr(lctx, f.err)
}

// runFn runs fn in a's transaction with fctx, and returns its error, or
// the transaction's failure when fn stopped because fctx ended with it.
func (g *Guard) runFn(ctx, lctx, fctx context.Context, a *attemptTx, fn func(context.Context, *Tx) error, tr *tracer) error {
	tx := a.tx
	sctx := withScope(fctx, &scope{g: g, key: tx.key, tx: tx})
	fstart := tr.now()
	ferr := fn(sctx, tx)
	tx.flushClaimStep()
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
	// (When fn failed before its first statement, nothing was claimed,
	// and nothing is found.)
	if end := a.rollbackEnd(); end.gone {
		retry, err := g.endedUnseen(ctx, a.tx, ferr, end)
		return retry && lctx.Err() == nil, err
	}
	if cause := context.Cause(lctx); errors.Is(cause, ErrLockLost) {
		return false, fmt.Errorf("%w (fn: %w)", cause, ferr)
	}
	return false, ferr
}
