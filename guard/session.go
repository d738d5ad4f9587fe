package guard

// session.go owns the session state a fenced transaction runs in, and the
// proof that the transaction Do commits is the one that claimed. It sends
// the three statements that begin, commit and roll back an attempt's
// transaction; it decides nothing about retries or outcomes.
//
// Safety does not rest on recognising SQL text. Right after START
// TRANSACTION, CALL redfence_begin() (migration 0002) turns autocommit off
// and sets completion_type to RELEASE for the session, and marks the
// transaction with a savepoint whose name only the Guard knows:
//   - whatever ends the transaction unseen (a deadlock's rollback reported
//     only through rows.Err, an implicit commit by a statement form nobody
//     listed, a procedure that commits), the statements fn sends after it
//     open a new transaction instead of committing one by one;
//   - a COMMIT or ROLLBACK fn sends, in any form, ends the session, so
//     nothing of fn runs after it;
//   - COMMIT is CALL redfence_commit(), which releases the savepoint first:
//     the server refuses (error 1305) when the savepoint is gone, that is
//     when the transaction is not the one that claimed, and then commits
//     nothing. Do rolls back and reads the fence row to tell what happened.
//
// The procedures put the session's own autocommit and completion_type back
// when the transaction ends. A connection whose transaction database/sql
// rolls back on its own (its ctx ended) is ended by the server at that
// ROLLBACK, so it never returns to the pool with autocommit off.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// The procedures take the name of the savepoint that marks the
// transaction (sessionMark), which is the Guard's secret: fn cannot roll
// back to it, make it again in a transaction of its own, or call the
// procedures that do, since it does not know the name.
const (
	sqlBeginSession = "CALL redfence_begin('%s')"
	sqlCommit       = "CALL redfence_commit('%s')"
	sqlCommitChain  = "CALL redfence_commit_chain('%s')"
	sqlRollback     = "CALL redfence_rollback('%s')"
)

// newSessionMark returns a savepoint name for a Guard: random, so that no
// statement of fn names it by chance or by design.
func newSessionMark() string { return "redfence_" + newOpID() }

// erSPDoesNotExist is ER_SP_DOES_NOT_EXIST: a savepoint (or a procedure)
// that does not exist.
const erSPDoesNotExist = 1305

// ErrSchemaOutdated is returned (wrapped) when the database lacks the
// procedures Do runs its transactions with: apply redfence's migrations
// (migrations.Apply, or `redfence migrate up`) to bring the schema to the
// version this release needs.
var ErrSchemaOutdated = errors.New("guard: the database's redfence schema is out of date; run migrations.Apply (or `redfence migrate up`)")

// errNotClaimingTx says that the transaction COMMIT would have committed is
// not the one that claimed: it ended before, unseen, and another one began.
var errNotClaimingTx = errors.New("the transaction that claimed the fence row ended before COMMIT")

// ending is what rolling back an attempt's transaction found.
type ending struct {
	// gone: the transaction that claimed had already ended.
	gone bool
	// autocommit: a statement of fn had switched autocommit back on, so
	// that what fn ran after the end of the claiming transaction may have
	// committed on its own. (Switched on and off again by fn, it is not
	// seen: see the Tx documentation.)
	autocommit bool
}

// notClaimingError is commitSession's refusal, with what the rollback that
// followed it found.
type notClaimingError struct {
	err error
	end ending
}

func (e *notClaimingError) Error() string { return e.err.Error() }
func (e *notClaimingError) Unwrap() error { return e.err }

// beginSession marks stx, just begun (or chained), as an attempt's
// transaction; see the file comment. It returns the session's connection
// id, for killOnEnd.
func beginSession(ctx context.Context, stx *sqlx.Tx, mark string) (connID uint64, err error) {
	err = stx.QueryRowContext(ctx, fmt.Sprintf(sqlBeginSession, mark)).Scan(&connID)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erSPDoesNotExist {
		return 0, fmt.Errorf("%w (%v)", ErrSchemaOutdated, err)
	}
	return connID, err
}

// killOnEnd makes the end of ctx end the server thread of connection
// connID (KILL, from another connection of the pool), until stop is
// called. When ctx ends during a statement, the driver closes its socket,
// but a server thread waiting for a row lock does not notice, and would
// keep waiting, holding the lock's queue place and a connection slot, for
// up to innodb_lock_wait_timeout. stop returns once a KILL under way has
// ended; the KILL is bounded by timeout.
//
// With query set, only the statement running at the time is ended (KILL
// QUERY): the transaction and the connection go on.
func (g *Guard) killOnEnd(ctx context.Context, connID uint64, timeout time.Duration, query bool) (stop func()) {
	if connID == 0 {
		return func() {}
	}
	kill := "KILL "
	if query {
		kill = "KILL QUERY "
	}
	done := make(chan struct{})
	after := context.AfterFunc(ctx, func() {
		defer close(done)
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		_, _ = g.db.ExecContext(kctx, kill+strconv.FormatUint(connID, 10))
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !after() {
				<-done
			}
		})
	}
}

// commitSession commits stx if it is still the transaction beginSession
// marked. A refusal because it is not comes back as an error wrapping
// errNotClaimingTx, with nothing committed; the session is still in the
// state beginSession set, for rollbackSession to restore.
func commitSession(ctx context.Context, stx *sqlx.Tx, chain bool, mark string) error {
	q := sqlCommit
	if chain {
		q = sqlCommitChain
	}
	_, err := stx.ExecContext(ctx, fmt.Sprintf(q, mark))
	if notClaimingTx(err) {
		return fmt.Errorf("%w: %w", errNotClaimingTx, err)
	}
	return err
}

// notClaimingTx reports whether err is redfence_commit's refusal.
func notClaimingTx(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erSPDoesNotExist
}

// rollbackSession rolls stx back and restores the session, and reports
// what it found (see ending).
func rollbackSession(ctx context.Context, stx *sqlx.Tx, mark string) (ending, error) {
	var gone, autocommit int
	err := stx.QueryRowContext(ctx, fmt.Sprintf(sqlRollback, mark)).Scan(&gone, &autocommit)
	if err != nil {
		return ending{}, err
	}
	return ending{gone: gone == 1, autocommit: autocommit == 1}, nil
}
