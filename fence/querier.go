package fence

import (
	"context"
	"database/sql"
	"reflect"

	"github.com/jmoiron/sqlx"
)

// Querier is the part of a transaction that fence uses. *sql.Tx, *sqlx.Tx and
// *sql.Conn satisfy it. So do *sql.DB and *sqlx.DB, which is right for
// [Lookup] and [Ensure] but not for [Claim]: a claim outside a transaction
// protects nothing, and Claim refuses a pool with [ErrNotTx]. On a *sql.Conn
// the caller is responsible for having started a transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier = (*sql.Tx)(nil)
	_ Querier = (*sql.Conn)(nil)
	_ Querier = (*sql.DB)(nil)
)

// isPool reports whether q is a connection pool, on which every statement
// runs in a transaction of its own.
func isPool(q Querier) bool {
	switch q.(type) {
	case *sql.DB, *sqlx.DB:
		return true
	}
	return false
}

// isNil reports whether q is nil or a nil pointer (a nil *sql.Tx passed as a
// Querier is not == nil).
func isNil(q Querier) bool {
	if q == nil {
		return true
	}
	v := reflect.ValueOf(q)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// beginner is the part of a pool that starts transactions.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTx runs f on q, in an explicit transaction of its own when q is a pool.
//
// A statement sent to a pool runs in a transaction of its own only while the
// connection has autocommit on. A DSN with autocommit=0 turns it into the
// first statement of a transaction that stays open on the pooled connection:
// a row written that way stays uncommitted (and locked) until that
// connection happens to commit, and a read sees a snapshot as old as that
// transaction. An explicit transaction commits what it wrote and reads fresh
// data whatever the DSN says.
func inTx(ctx context.Context, q Querier, opts *sql.TxOptions, f func(Querier) error) (err error) {
	b, ok := q.(beginner)
	if !ok || !isPool(q) {
		return f(q)
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = f(tx); err != nil {
		return err
	}
	return tx.Commit()
}
