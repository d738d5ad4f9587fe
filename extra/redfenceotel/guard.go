package redfenceotel

// This file puts the hooks where a Guard reads them. guard.New keeps a copy
// of the Options it is given, so hooks must be in them before that call:
// NewGuard makes that call itself, and GuardOptions returns the Options to
// pass to it.

import (
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// ErrNilOptions is returned by [Instrument] for a nil *guard.Options.
var ErrNilOptions = errors.New("redfenceotel: nil *guard.Options")

// NewGuard returns guard.New(locker, db, o) with the hooks of [Hooks] added
// to those o already has (theirs run first; for OnDo, ours receives the ctx
// theirs returned). o may be nil and is not changed. The error is one of
// creating the instruments; invalid arguments are reported by the Guard, as
// guard.New does.
func NewGuard(locker *redislock.Locker, db *sqlx.DB, o *guard.Options, opt *Options) (*guard.Guard, error) {
	gopt, err := GuardOptions(o, opt)
	if err != nil {
		return nil, err
	}
	return guard.New(locker, db, gopt), nil
}

// GuardOptions returns a copy of o (the defaults when o is nil) whose Hooks
// also record traces and metrics, as [NewGuard] adds them. Pass the result
// to guard.New: a Guard keeps the Options it was built with, so Options
// changed after guard.New are never read. o is not changed.
func GuardOptions(o *guard.Options, opt *Options) (*guard.Options, error) {
	h, err := Hooks(opt)
	if err != nil {
		return nil, err
	}
	var c guard.Options
	if o != nil {
		c = *o
	}
	c.Hooks = chain(c.Hooks, h)
	return &c, nil
}

// Instrument adds the hooks of [Hooks] to o in place, after any hooks o
// already has.
//
// Deprecated: Instrument works only when it is called before o is passed to
// guard.New, which keeps a copy of o; called after, it records nothing and
// cannot tell. Use [NewGuard], or pass the result of [GuardOptions] to
// guard.New.
func Instrument(o *guard.Options, opt *Options) error {
	if o == nil {
		return ErrNilOptions
	}
	h, err := Hooks(opt)
	if err != nil {
		return err
	}
	o.Hooks = chain(o.Hooks, h)
	return nil
}
