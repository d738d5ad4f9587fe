package guard

// nest.go owns a Do called inside fn: on the same key it joins the
// enclosing call's transaction; on another key it is checked against the
// pool's size.

import (
	"context"
	"fmt"
	"strconv"
)

// scope records, in the ctx given to fn, that a Do holds key with tx. Scopes
// of nested calls on different keys form a chain.
type scope struct {
	g      *Guard
	key    string
	tx     *Tx
	parent *scope
}

type scopeKey struct{}

func withScope(ctx context.Context, s *scope) context.Context {
	s.parent, _ = ctx.Value(scopeKey{}).(*scope)
	return context.WithValue(ctx, scopeKey{}, s)
}

// heldScope returns the scope in ctx holding key, or nil.
func heldScope(ctx context.Context, key string) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	for ; s != nil; s = s.parent {
		if s.key == key {
			return s
		}
	}
	return nil
}

// checkPool refuses a nested call on another key that could never get a
// connection: the enclosing calls in ctx on the same pool each hold one for
// their transaction, and the pool allows no more.
func (g *Guard) checkPool(ctx context.Context, key string) error {
	held := 0
	for s, _ := ctx.Value(scopeKey{}).(*scope); s != nil; s = s.parent {
		if s.g.db.DB == g.db.DB {
			held++
			if s.g.handsOffAtClaim() {
				// The enclosing key's next holder may hold one more,
				// waiting with its claim for the enclosing transaction.
				held++
			}
		}
	}
	if held == 0 {
		return nil
	}
	if limit := g.db.Stats().MaxOpenConnections; limit > 0 && held >= limit {
		return fmt.Errorf("%w: %q inside enclosing calls that need %d connection(s), pool limited to %d", ErrNestedPool, key, held, limit)
	}
	return nil
}

// join runs fn in the transaction of the enclosing Do that holds key, inside
// a savepoint so that an error of fn leaves none of its writes behind.
func (g *Guard) join(ctx context.Context, s *scope, fn func(context.Context, *Tx) error) (err error) {
	if s.g != g && (s.g.locker != g.locker || s.g.db != g.db || s.g.opt.Namespace != g.opt.Namespace) {
		return fmt.Errorf("%w: key %q is held by an enclosing Do of another Guard", ErrReentry, s.key)
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	tx := s.tx
	if f := tx.failure(); f != nil {
		return fmt.Errorf("guard: nested call on %q: transaction no longer usable: %w", s.key, f.err)
	}
	n := tx.savepoints.Add(1)
	sp := "redfence_sp" + strconv.FormatInt(n, 10)
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		return fmt.Errorf("guard: nested call on %q: savepoint: %w", s.key, err)
	}
	ok := false
	defer func() {
		if ok || tx.failure() != nil {
			// A transaction the server rolled back has lost the savepoint
			// with it; the enclosing Do retries or fails the whole attempt.
			return
		}
		if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+sp); rerr != nil {
			tx.fail(fmt.Errorf("guard: nested call on %q: rollback to savepoint: %w", s.key, rerr), false)
			return
		}
		tx.rolledBackTo(n)
	}()
	g.opt.Logger.DebugContext(ctx, "guard: nested call joins the enclosing transaction",
		"key", s.key, "token", tx.token)
	err = fn(ctx, tx)
	ok = err == nil
	return err
}
