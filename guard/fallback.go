package guard

// fallback.go owns database mode (Options.Outage): when Redis fails, the
// switch to serialising a key's callers on the fence row alone, with a
// minted token, and the way back. A call in database mode runs the same
// attempts (attempt.go) as one under a Redis lock, holding a slot here
// instead of a turn of the lock.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/redislock"
)

// Fallback says what Do does while Redis is unavailable.
type Fallback int

const (
	// FallbackNone: Do fails while Redis is unavailable.
	FallbackNone Fallback = iota
	// FallbackDatabase: while Redis is unavailable, Do serialises the
	// callers of a key in the database itself. The fence row's lock is the
	// mutex, and the claim mints the token (see fence.ClaimNextExisting),
	// so tokens keep growing across both modes and a Redis-mode holder and
	// a database-mode holder of one key are serialised by the fence row
	// like any two holders. Callers in database mode wait in the database,
	// each holding a connection (bounded by Options.FallbackMaxWaiters and
	// FallbackMaxWaitersPerKey), and the queue is not FIFO. A Do nested in
	// fn on another key takes no slot of its own (it would wait for slots
	// that callers blocked behind its enclosing call hold): the caps bound
	// the outermost calls, and each nested call uses one connection more
	// while its enclosing call runs, as in Redis mode.
	//
	// When the key's tokens are above the clocks (after a floor raise), both
	// modes mint the last token + 1, so each claim another process makes in
	// database mode fences the next Redis-mode call: that call raises the
	// token floor and runs again within the same Do, under a new turn of the
	// lock, up to Options.MaxAttempts attempts (OnFenced and OnRetry report
	// it).
	//
	// FallbackDatabase is refused on a pool whose server has peers that also
	// take writes (a Galera node, Group Replication in multi-primary mode):
	// row locks do not reach the other members, so database-mode callers
	// writing through two of them would run fn at once. There
	// [Guard.CheckDatabase] and every Do, Redis mode included, return an
	// error wrapping [ErrUnsafePool] that names the option; use FallbackNone.
	FallbackDatabase
)

func (f Fallback) String() string {
	switch f {
	case FallbackNone:
		return "none"
	case FallbackDatabase:
		return "database"
	}
	return fmt.Sprintf("Fallback(%d)", int(f))
}

// Mode is how a Do holds its key.
type Mode int

const (
	// ModeRedis: through the fair Redis lock and its token.
	ModeRedis Mode = iota
	// ModeDatabase: through the fence row alone, with a token the database
	// minted (Options.Fallback).
	ModeDatabase
)

func (m Mode) String() string {
	if m == ModeDatabase {
		return "database"
	}
	return "redis"
}

// errUseDatabase ends a Redis-mode lock wait when the breaker opens.
var errUseDatabase = errors.New("guard: Redis unavailable; switching to the database")

// fallback is a Guard's state for Options.Fallback: the circuit breaker
// over Redis, the health probe, and the limits on database-mode callers.
type fallback struct {
	g     *Guard
	cb    *gobreaker.CircuitBreaker[*redislock.Lock]
	owner string // owner recorded by database-mode claims

	mu         sync.Mutex
	waits      map[*int]context.CancelCauseFunc // Redis-mode lock waits to end when the breaker opens
	probing    bool                             // a health probe is in flight
	recovering bool                             // the half-open probe is in flight
	probed     time.Time                        // when the last probe ended

	all    chan struct{}            // slots of database-mode callers in the Guard
	perKey map[string]chan struct{} // slots per key, removed when unused
	users  map[string]int           // callers holding or waiting for a key's slots
}

func newFallback(g *Guard) *fallback {
	var b [6]byte
	_, _ = rand.Read(b[:])
	f := &fallback{g: g, owner: dbOwnerPrefix + hex.EncodeToString(b[:]),
		waits: map[*int]context.CancelCauseFunc{}, all: make(chan struct{}, g.opt.FallbackMaxWaiters),
		perKey: map[string]chan struct{}{}, users: map[string]int{}}
	threshold := uint32(g.opt.FallbackAfter)
	f.cb = gobreaker.NewCircuitBreaker[*redislock.Lock](gobreaker.Settings{
		Name:        "redfence-redis",
		MaxRequests: 1,
		Timeout:     g.opt.FallbackRetry,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
		// The caller giving up, or bad input, says nothing of Redis.
		IsExcluded: func(err error) bool { return err != nil && !redisFailure(err) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			f.changed(from, to)
		},
	})
	return f
}

// dbOwnerPrefix begins the owner that database-mode claims record in the
// fence row, which tells a token minted in database mode (againAfterFence).
const dbOwnerPrefix = "db:"

// redisFailure tells whether err, from Lock or Ping, says Redis is
// unavailable, as opposed to the caller giving up or bad input.
func redisFailure(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, errUseDatabase),
		errors.Is(err, redislock.ErrInvalidKey), errors.Is(err, redislock.ErrInvalidOptions),
		errors.Is(err, redislock.ErrClosed), errors.Is(err, redislock.ErrNotReplicated):
		return false
	}
	return true
}

// errProbe marks a health probe that got no answer in time.
var errProbe = errors.New("guard: Redis did not answer the health probe")

func (f *fallback) changed(from, to gobreaker.State) {
	g := f.g
	switch to {
	case gobreaker.StateOpen:
		if from == gobreaker.StateClosed {
			g.opt.Logger.Warn("guard: Redis unavailable; Do runs in database mode")
			if h := g.opt.Hooks.OnModeChange; h != nil {
				h(ModeRedis, ModeDatabase)
			}
		}
		f.mu.Lock()
		for w, cancel := range f.waits {
			cancel(errUseDatabase)
			delete(f.waits, w)
		}
		f.mu.Unlock()
	case gobreaker.StateClosed:
		g.opt.Logger.Warn("guard: Redis answers again; Do runs in Redis mode")
		if h := g.opt.Hooks.OnModeChange; h != nil {
			h(ModeDatabase, ModeRedis)
		}
	}
}

// lock takes the Redis lock through the breaker. It returns errUseDatabase
// (wrapped) when Do must run in database mode instead: the breaker is open,
// a half-open probe is already under way, or it opened during the wait.
// open reports whether the Guard is in database mode: the breaker is not
// closed.
func (f *fallback) open() bool { return f.cb.State() != gobreaker.StateClosed }

func (f *fallback) lock(ctx context.Context, key string, opts ...redislock.LockOption) (*redislock.Lock, error) {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := new(int)
	f.mu.Lock()
	f.waits[w] = cancel
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waits, w)
		f.mu.Unlock()
	}()

	// A wait longer than FallbackProbeAfter may be a queue or a Redis that
	// stopped answering: health probes, every FallbackProbeAfter while the
	// wait lasts (and at most that often per Guard), tell them apart.
	stopProbes := make(chan struct{})
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		t := time.NewTicker(f.g.opt.FallbackProbeAfter)
		defer t.Stop()
		for {
			select {
			case <-stopProbes:
				return
			case <-lctx.Done():
				return
			case <-t.C:
				f.probe(lctx)
			}
		}
	}()
	defer func() {
		close(stopProbes)
		cancel(nil) // a probe under way returns at once
		<-probesDone
	}()

	switch f.cb.State() { // moves an expired open state to half-open
	case gobreaker.StateOpen:
		return nil, errUseDatabase
	case gobreaker.StateHalfOpen:
		// Whether Redis is back is told by a PING on the side, not by a
		// caller's lock wait, which a dead Redis could hold for its client's
		// dial and read timeouts.
		f.recover()
		return nil, errUseDatabase
	}
	lk, err := f.cb.Execute(func() (*redislock.Lock, error) {
		return f.g.locker.Lock(lctx, key, opts...)
	})
	switch {
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, fmt.Errorf("%w (%v)", errUseDatabase, err)
	case err != nil && errors.Is(context.Cause(lctx), errUseDatabase) && ctx.Err() == nil:
		return nil, errUseDatabase
	}
	return lk, err
}

// probe pings Redis through the breaker, unless a probe is under way or
// one ended within FallbackProbeAfter. It returns early when ctx ends (the
// ping then finishes on a goroutine the Locker owns).
func (f *fallback) probe(ctx context.Context) {
	opt := &f.g.opt
	f.mu.Lock()
	if f.probing || time.Since(f.probed) < opt.FallbackProbeAfter {
		f.mu.Unlock()
		return
	}
	f.probing = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.probing, f.probed = false, time.Now()
		f.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(ctx, opt.FallbackProbeTimeout)
	defer cancel()
	_, _ = f.cb.Execute(func() (*redislock.Lock, error) {
		err := f.g.locker.Ping(pctx)
		if err != nil && ctx.Err() == nil && pctx.Err() != nil {
			// No answer within the probe's own timeout: a failure of Redis,
			// not of the caller.
			err = fmt.Errorf("%w within %v", errProbe, opt.FallbackProbeTimeout)
		}
		return nil, err
	})
}

// recover starts the half-open probe, unless one is under way: a PING
// bounded by FallbackProbeTimeout, on a goroutine of the Guard's that ends
// with it (Locker.Ping returns when its ctx ends). Its success closes the
// breaker: the next calls use Redis again.
func (f *fallback) recover() {
	f.mu.Lock()
	if f.recovering {
		f.mu.Unlock()
		return
	}
	f.recovering = true
	f.mu.Unlock()
	go func() {
		defer func() {
			f.mu.Lock()
			f.recovering = false
			f.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), f.g.opt.FallbackProbeTimeout)
		defer cancel()
		_, _ = f.cb.Execute(func() (*redislock.Lock, error) {
			err := f.g.locker.Ping(ctx)
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w within %v", errProbe, f.g.opt.FallbackProbeTimeout)
			}
			return nil, err
		})
	}()
}

// admit waits for a database-mode slot for key, holding no connection, and
// returns the function that frees it.
func (f *fallback) admit(ctx context.Context, key string) (func(), error) {
	f.mu.Lock()
	ch := f.perKey[key]
	if ch == nil {
		ch = make(chan struct{}, f.g.opt.FallbackMaxWaitersPerKey)
		f.perKey[key] = ch
	}
	f.users[key]++
	f.mu.Unlock()
	leave := func() {
		f.mu.Lock()
		if f.users[key]--; f.users[key] == 0 {
			delete(f.users, key)
			delete(f.perKey, key)
		}
		f.mu.Unlock()
	}
	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, fmt.Errorf("%w: %q: %w", ErrFallbackLimit, key, context.Cause(ctx))
	}
	select {
	case f.all <- struct{}{}:
	case <-ctx.Done():
		<-ch
		leave()
		return nil, fmt.Errorf("%w: %q: %w", ErrFallbackLimit, key, context.Cause(ctx))
	}
	return func() {
		<-f.all
		<-ch
		leave()
	}, nil
}

// nested reports whether ctx is the ctx of an fn that a Do still runs. A Do
// called with it takes no database-mode slot: its enclosing calls hold the
// connections and fence rows that the callers holding the slots may be
// waiting for, so waiting for a slot could wait for itself (every slot held
// by an enclosing call whose nested call waits, or a key's slots held by
// callers waiting for a slot of the Guard). The slots thus bound the
// outermost calls; each nested one uses a connection more while its
// enclosing call runs, as in Redis mode, and nested calls that cannot all
// get one are refused with ErrNestedPool (checkPool).
func nested(ctx context.Context) bool {
	for s, _ := ctx.Value(scopeKey{}).(*scope); s != nil; s = s.parent {
		if !s.tx.ended.Load() {
			return true
		}
	}
	return false
}

// dbMode reports whether h holds its key in database mode, where each
// claim mints the token: the fence row's lock, which ends with the
// transaction, is then all that keeps the key's next caller out.
func (h holding) dbMode() bool { return h.token == 0 }

// againAfterFence reports whether attempt, whose claim with a Redis token
// was fenced (err, after Guard.fenced raised the token floor), runs again
// under a new turn of the lock and a new token, within the same Do: when
// the token that fenced it was minted in database mode. Tokens above the
// clocks (after a floor raise) are minted as the last one + 1 in both
// modes, so while another process stays in database mode, each of its
// claims fences the next Redis-mode call; nothing ran under the fenced
// token, and the new turn's token is above the floor just raised. Bounded
// by Options.MaxAttempts like any retry.
//
// A process that keeps claiming the key in database mode can mint past the
// raised floor again before the new turn claims. From the second fenced
// attempt of a Do (or before its last attempt), the floor is raised by
// fenceLead more, so that the last attempts claim above every token that
// process can mint meanwhile. The lead is not taken at once: tokens then
// run ahead of the clocks only while the modes keep colliding.
func (g *Guard) againAfterFence(ctx context.Context, h holding, attempt int, err error) bool {
	var stale *fence.StaleError
	if h.dbMode() || attempt >= g.opt.MaxAttempts || !errors.As(err, &stale) ||
		!strings.HasPrefix(stale.CurrentOwner, dbOwnerPrefix) {
		return false
	}
	log := g.opt.Logger
	log.WarnContext(ctx, "guard: fenced by a token minted in database mode; trying again under a new token",
		"key", h.key, "token", h.token, "current", stale.Current, "attempt", attempt)
	if attempt > 1 || attempt+1 >= g.opt.MaxAttempts {
		floor := uint64(math.MaxUint64 - 1) // the largest floor RaiseTokenFloor takes
		if stale.Current < floor-fenceLead {
			floor = stale.Current + fenceLead
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opt.UnlockTimeout)
		rerr := g.locker.RaiseTokenFloor(rctx, h.key, floor)
		cancel()
		if rerr != nil {
			// The next attempt may be fenced again, and is retried as this
			// one while attempts remain.
			log.WarnContext(ctx, "guard: raising the token floor ahead of database mode failed",
				"key", h.key, "floor", floor, "err", rerr)
		}
	}
	if hook := g.opt.Hooks.OnRetry; hook != nil {
		hook(h.key, attempt, err)
	}
	return true
}

// fenceLead is how far above a token minted in database mode
// againAfterFence raises the floor: a million claims, far more than a
// process can commit while an attempt waits for its new turn.
const fenceLead = 1_000_000

// runDB is Do in database mode: no Redis, the fence row's lock serialises the
// callers, and each attempt's claim mints the token.
func (g *Guard) runDB(ctx context.Context, key string, fn func(context.Context, *Tx) error, tr *tracer) error {
	f := g.fb
	start := time.Now()
	release := func() {}
	if !nested(ctx) {
		var err error
		if release, err = f.admit(ctx, key); err != nil {
			tr.step(StepLock, 0, 0, start, err)
			return err
		}
	}
	tr.mode(ModeDatabase)
	tr.step(StepLock, 0, 0, start, nil)
	g.opt.Logger.DebugContext(ctx, "guard: database mode", "key", key)
	var released chan struct{}
	w := &callWork{g: g, ctx: ctx, lctx: ctx, key: key, fn: fn, acquired: time.Now(), released: &released, tr: tr}
	_, err := g.attempts(ctx, ctx, holding{key: key, owner: f.owner}, 1, w)
	// The key is held until the transaction's connection is back (the fence
	// row's lock ends with it) and the slot is given up: that is the unlock
	// step of database mode, so that hooks see every acquisition end. When
	// ctx ends first (the connection went silent after COMMIT), Do returns
	// and the slot is given up once the connection is back, so that the
	// slots still bound the connections in use.
	ustart := time.Now()
	if awaitRelease(ctx, released) {
		release()
	} else {
		go func() {
			<-released
			release()
		}()
	}
	tr.step(StepUnlock, 0, 0, ustart, nil)
	return err
}
