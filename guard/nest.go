package guard

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redfence/redfence/fence"
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

// join runs fn in the transaction of the enclosing Do that holds key, inside
// a savepoint so that an error of fn leaves none of its writes behind.
func (g *Guard) join(ctx context.Context, s *scope, fn func(context.Context, *Tx) error) (err error) {
	if s.g != g && (s.g.locker != g.locker || s.g.db != g.db) {
		return fmt.Errorf("%w: key %q is held by an enclosing Do of another Guard", ErrReentry, s.key)
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	tx := s.tx
	sp := "redfence_sp" + strconv.FormatInt(tx.savepoints.Add(1), 10)
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		err = fmt.Errorf("guard: nested call on %q: savepoint: %w", s.key, err)
		if fence.Retryable(err) {
			tx.markBroken(err)
		}
		return err
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		if err != nil && fence.Retryable(err) {
			// The server may have rolled the whole transaction back; the
			// savepoint is gone with it.
			tx.markBroken(err)
			return
		}
		if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+sp); rerr != nil {
			tx.markBroken(fmt.Errorf("guard: nested call on %q: rollback to savepoint: %w", s.key, rerr))
		}
	}()
	g.opt.Logger.DebugContext(ctx, "guard: nested call joins the enclosing transaction",
		"key", s.key, "token", tx.token)
	err = fn(ctx, tx)
	ok = err == nil
	return err
}
