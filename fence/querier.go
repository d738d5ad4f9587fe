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
