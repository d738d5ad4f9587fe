package guard

// read.go owns DoRead: a call whose first statement, a read the caller
// names up front, goes to the server with the claim, in one request, before
// fn starts. It builds and checks the Read, and scans its result; sending
// it is claim.go's (claiming.run), and it is the wrapped fn's first
// statement wherever it cannot ride (batches, database mode, nesting).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"

	"github.com/jmoiron/sqlx"
)

// A Read is the first statement of a call made with [Guard.DoRead]: a
// SELECT whose result is in its destination when fn starts. Make one with
// [ReadOne] or [ReadAll].
type Read struct {
	dest  any
	query string
	args  []any
	all   bool
}

// ReadOne returns a Read of the first row of query into dest, as
// sqlx.GetContext scans it: dest is a pointer to a struct, whose fields
// take the columns of the same name, or to a value that takes the one
// column. When query returns no row, DoRead returns sql.ErrNoRows without
// calling fn; use [ReadAll] for a row that may be missing.
func ReadOne(dest any, query string, args ...any) Read {
	return Read{dest: dest, query: query, args: args}
}

// ReadAll returns a Read of every row of query into dest, a pointer to a
// slice, as sqlx.SelectContext scans them (none leaves the slice empty).
func ReadAll(dest any, query string, args ...any) Read {
	return Read{dest: dest, query: query, args: args, all: true}
}

// ErrInvalidRead is returned by DoRead, before anything is locked, for a
// Read that is not one: the zero Read, an empty query, or a destination
// that is not a non-nil pointer (to a slice, for ReadAll).
var ErrInvalidRead = errors.New("guard: invalid Read")

// check returns an error wrapping ErrInvalidRead when r cannot run.
func (r *Read) check() error {
	v := reflect.ValueOf(r.dest)
	switch {
	case r.query == "":
		return fmt.Errorf("%w: no query (make a Read with ReadOne or ReadAll)", ErrInvalidRead)
	case v.Kind() != reflect.Pointer || v.IsNil():
		return fmt.Errorf("%w: destination %T is not a non-nil pointer", ErrInvalidRead, r.dest)
	case r.all && v.Elem().Kind() != reflect.Slice:
		return fmt.Errorf("%w: ReadAll needs a pointer to a slice, not %T", ErrInvalidRead, r.dest)
	}
	return nil
}

// DoRead is [Guard.Do] whose transaction begins with r: fn starts once the
// claim holds the key's fence row and r's result is in its destination.
// Where it can, DoRead sends r's SELECT with the claim, in one request
// (the claim alone costs a round trip before fn's first statement), so
// that a call makes the round trips of the same transaction without the
// fence. On a hot key the next holder's claim and read then wait at the
// fence row together and answer as soon as this transaction commits, as a
// SELECT ... FOR UPDATE of the row would: the serial path of the key is
// fn's statements after the read, and COMMIT.
//
// Everything else is as with Do: fn does not run for a call that is
// fenced, the lock passes on at the claim, and never to a holder whose fn
// would run beside this one. r runs again with every attempt, before fn.
// r's SELECT always runs inside the fenced transaction, after the claim.
// It goes with the claim when its '?' are all placeholders and its
// arguments have literals the server binds (integers from 0, doubles,
// strings without a backslash or NUL, NULL), on a key whose fence row this
// Guard has seen, in Redis mode, neither batched nor nested, on a pool
// that does not set sql_select_limit and reaches no Galera node. Otherwise
// it is fn's first statement, sent through tx. A read that went with the
// claim comes back in the text protocol, as with interpolateParams=true:
// on a pool that prepares statements, a FLOAT column then reads as the
// server prints it (six significant digits). Its error is Do's, as fn's
// would be; a read that found no row for ReadOne returns sql.ErrNoRows.
func (g *Guard) DoRead(ctx context.Context, key string, r Read, fn func(ctx context.Context, tx *Tx) error) error {
	rd := &r
	if fn == nil {
		return g.do(ctx, key, nil, rd) // ErrNilFunc
	}
	return g.do(ctx, key, func(ctx context.Context, tx *Tx) error {
		if err := tx.read(ctx, rd); err != nil {
			return err
		}
		return fn(ctx, tx)
	}, rd)
}

// firstRead is the outcome of a Read that went with the claim: its error,
// once its result was scanned into its destination.
type firstRead struct {
	read *Read
	err  error
}

// read runs r in t, unless it went with the claim: then its result is
// already in r's destination, and read returns its error.
func (t *Tx) read(ctx context.Context, r *Read) error {
	if p := t.first; p != nil && p.read == r {
		t.first = nil
		return p.err
	}
	if r.all {
		r.empty()
		return t.SelectContext(ctx, r.dest, r.query, r.args...)
	}
	return t.GetContext(ctx, r.dest, r.query, r.args...)
}

// empty sets the slice of a ReadAll to nil, since sqlx appends to it: an
// attempt that runs again starts from no rows, and a slice the caller kept
// from an earlier call is left as it was.
func (r *Read) empty() {
	v := reflect.ValueOf(r.dest).Elem()
	v.Set(reflect.Zero(v.Type()))
}

// scan scans the result of r, sent with the claim, from rows, where the
// claim's answer has been read, and closes rows. It returns nil when r
// could not run as a prepared statement, and must be sent as it is.
func (r *Read) scan(ctx context.Context, t *Tx, rows *sqlx.Rows) *firstRead {
	defer rows.Close()
	if r.all {
		r.empty()
	}
	ok, asIs, err := t.riddenResult(rows)
	switch {
	case asIs:
		return nil
	case err != nil: // the statement's, observed
	case !ok && !r.all:
		err = sql.ErrNoRows // no result set (SELECT … INTO), as sqlx's Get reads it
	case !ok: // ReadAll: no rows
	case r.all:
		err = t.observe(sqlx.SelectContext(ctx, riddenRows{rows}, r.dest, r.query, r.args...))
	default:
		err = t.observe(scanOne(rows, r.dest))
	}
	return &firstRead{read: r, err: err}
}
