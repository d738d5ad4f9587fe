package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ensureExistsQuery is a consistent (non-locking) read, so Ensure does not
// wait for a holder's transaction when the row already exists. Like the claim,
// it carries its value as a hex literal to be one round trip on any DSN.
func ensureExistsQuery(resource string) string {
	return "SELECT 1 FROM " + Table + " WHERE resource = " + hexLiteral(resource)
}

// ensureQuery creates the row with token 0, below every real token; if
// another session created it meanwhile, the no-op update leaves it alone.
func ensureQuery(resource string) string {
	return "INSERT INTO " + Table + " (resource, token, updated_at) VALUES (" + hexLiteral(resource) +
		", 0, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE token = token"
}

// Ensure creates the fence row of resource, with token 0, if it does not
// exist yet. Call it on a *sql.DB, outside the transaction that will claim,
// before the first claim of a resource. On a pool it runs in an explicit
// transaction of its own (a DSN with autocommit=0 would otherwise leave the
// new row uncommitted on a pooled connection).
//
// Why: when the fence row does not exist, [Claim] creates it inside the
// caller's transaction. If that transaction rolls back while two or more
// other transactions are waiting to claim the same new resource, InnoDB
// (REPEATABLE READ) turns the waiters' locks into gap locks and their retried
// inserts deadlock: one of them fails with error 1213 ([Retryable]). A row
// that exists before any claiming transaction starts is never deleted by a
// rollback, and claims on it only wait for one another.
//
// Errors: [ErrNilTx], [ErrInvalidResource], or the server's error wrapped.
func Ensure(ctx context.Context, db Querier, resource string) error {
	if isNil(db) {
		return ErrNilTx
	}
	if err := validResource(resource); err != nil {
		return err
	}
	err := inTx(ctx, db, nil, func(q Querier) error {
		var one int
		err := q.QueryRowContext(ctx, ensureExistsQuery(resource)).Scan(&one)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err = q.ExecContext(ctx, ensureQuery(resource))
		return err
	})
	if err != nil {
		return fmt.Errorf("fence: ensure %q: %w", resource, err)
	}
	return nil
}
