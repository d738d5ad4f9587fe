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
