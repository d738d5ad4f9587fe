package guard

// turn.go owns a turn of the key's lock for one caller: taking the Redis
// lock (or, while Redis is unavailable, running in database mode, see
// fallback.go), watching it for loss, handing it on (handoff.go) and
// releasing it, around the attempts (attempt.go) that run under it. It
// touches no transaction.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redfence/redfence/internal/errs"
	"github.com/redfence/redfence/redislock"
)

// run runs one caller's fn under turns of key's lock (see turns), or in
// database mode when Redis is unavailable.
func (g *Guard) run(ctx context.Context, key string, fn func(context.Context, *Tx) error, first *Read, tr *tracer) error {
	// A committed transaction's connection is released after Do returns
	// (see commit): its ROLLBACK is not on the caller's path.
	var released chan struct{}
	w := &callWork{g: g, ctx: ctx, key: key, fn: fn, first: first, released: &released, tr: tr}
	defer func() { w.early.giveBack() }() // not taken: a hook panicked, say
	err, uerr := g.turns(ctx, key, w)
	switch {
	case uerr == nil:
	case err != nil:
		// No new turn after a failed unlock: the lock would only come back
		// when its lease expires.
		err = errs.Join(err, uerr)
	default:
		// Committed (or panicking): reporting the failed unlock as Do's
		// error would invite a retry that applies the work twice. The lock
		// expires with its lease.
		g.opt.Logger.WarnContext(ctx, "guard: unlock failed; the lock expires with its lease", "key", key, "err", uerr)
	}
	return err
}

// turnWork is work that runs under turns of its key's lock: one caller's
// (callWork) or a batch's (batchRun).
type turnWork interface {
	work
	// lockOptions returns the options of the lock request of turn n.
	lockOptions(n int) []redislock.LockOption
	// granted records the grant of turn n (from 0) of the lock lk, after
	// waiting since start (OnAcquired).
	granted(lk *redislock.Lock, start time.Time, n int)
	// hold sets the work up for turn n: lctx ends when the lock is lost;
	// ho, when not nil, hands the lock on at the claim.
	hold(lctx context.Context, ho *handOff, n int)
	// notGranted ends the work when the lock was not granted: err, or,
	// with useDB, Redis unavailable (see lockTurn). It returns the work's
	// error.
	notGranted(start time.Time, useDB bool, err error) error
	// ended takes the result of a turn's attempts and returns the error to
	// report for it.
	ended(again int, err error) error
	// unlocked records the end of a turn, whose unlock (or hand-off)
	// started at start.
	unlocked(token uint64, start time.Time, err error)
}

// turns runs w under turns of key's lock until it is done. Usually one
// turn serves every attempt; when the lock was handed on at the claim, an
// attempt that must run again takes a new turn, after a backoff. uerr is a
// failed unlock, after which no new turn is taken.
func (g *Guard) turns(ctx context.Context, key string, w turnWork) (err, uerr error) {
	for n, first := 0, 1; ; n++ {
		start := time.Now()
		lk, useDB, lerr := g.lockTurn(ctx, key, w.lockOptions(n)...)
		if lerr != nil {
			return w.notGranted(start, useDB, lerr), nil
		}
		var again int
		again, err, uerr = g.holdTurn(ctx, lk, start, n, first, w)
		if again == 0 || uerr != nil {
			return err, uerr
		}
		if err != nil { // a failed attempt backs off; a batch's rerun of its other members does not
			if serr := sleep(ctx, backoff(again-1, g.opt.BackoffMin, g.opt.BackoffMax, jitter())); serr != nil {
				return errs.Join(err, serr), nil
			}
		}
		first = again
	}
}

// lockTurn takes a turn of key's lock. Lock returns by the time ctx ends
// even when Redis does not answer, and passes on a grant that raced with
// the end of ctx. With the database fallback, useDB says that the lock
// failed because Redis is unavailable, while ctx lasts.
func (g *Guard) lockTurn(ctx context.Context, key string, opts ...redislock.LockOption) (lk *redislock.Lock, useDB bool, err error) {
	if g.fb == nil {
		lk, err = g.locker.Lock(ctx, key, opts...)
		return lk, false, err
	}
	lk, err = g.fb.lock(ctx, key, opts...)
	useDB = err != nil && ctx.Err() == nil && (errors.Is(err, errUseDatabase) || redisFailure(err))
	return lk, useDB, err
}

// holdTurn runs w's attempts from number first under lk, turn n, and ends
// the turn: unlock, or wait for the hand-off at the claim to end. again is
// the number of the next attempt when one must run under a new turn, 0
// when w is done.
func (g *Guard) holdTurn(ctx context.Context, lk *redislock.Lock, start time.Time, n, first int, w turnWork) (again int, err, uerr error) {
	w.granted(lk, start, n) // before the watch: OnAcquired comes before OnLost
	lctx, detach, stop := g.watch(ctx, lk)
	var ho *handOff
	if g.handsOffAtClaim() {
		ho = newHandOff(g, lk, detach)
	}
	w.hold(lctx, ho, n)
	defer func() { // on panics too
		stop()
		ustart := w.now()
		if ho.handed() {
			uerr = ho.wait()
			ustart = ho.start
		} else {
			uerr = g.unlock(ctx, lk)
		}
		w.unlocked(lk.Token(), ustart, uerr)
	}()
	h := holding{key: lk.Key(), token: lk.Token(), owner: lk.Owner(), handOff: ho}
	again, err = g.attempts(ctx, lctx, h, first, w)
	return again, w.ended(again, err), nil
}

// holding is what a Do holds the key with: the lock's token and owner, or,
// in database mode, no token (each attempt's claim mints one).
type holding struct {
	key     string
	token   uint64
	owner   string
	handOff *handOff // nil unless the lock is passed on at the claim
	early   *early   // a transaction begun ahead of the grant, for the first attempt
	// claimStart is the start of the attempt's claim step, set by attempts:
	// an attempt that runs again after its claim found no fence row (see
	// makeRow) keeps the start of its first claim.
	claimStart time.Time
}

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
