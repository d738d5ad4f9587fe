package guard

// do.go owns the entry of a call: Do checks its input, joins an enclosing
// call of the same key or checks the pool for a nested one (nest.go),
// checks the server (check.go), starts the tracing of the call
// (observe.go) and sends it one of two ways: into a batch (batch.go) or to
// a turn of the key's lock (turn.go). It runs no SQL of fn's and takes no
// lock itself.

import (
	"context"
	"fmt"

	"github.com/redfence/redfence/redislock"
)

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
	return g.do(ctx, key, fn, nil)
}

// do is Do, with first, when not nil, the Read fn begins with (DoRead),
// which the attempts may send with the claim.
func (g *Guard) do(ctx context.Context, key string, fn func(ctx context.Context, tx *Tx) error, first *Read) error {
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
	if first != nil {
		if err := first.check(); err != nil {
			return err
		}
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
		g.calls.enter(key)
		defer g.calls.leave(key)
		err = g.run(ctx, key, fn, first, tr)
	}
	tr.done(err)
	return err
}

func (g *Guard) checkKey(key string) error {
	if err := redislock.ValidateKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}
