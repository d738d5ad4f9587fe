package guard

// session.go owns the session state a fenced transaction runs in, and the
// proof that the transaction Do commits is the one that claimed. It sends
// the statements that begin (with the claim), commit and roll back an attempt's
// transaction; it decides nothing about retries or outcomes.
//
// Safety does not rest on recognising SQL text. The first statement after
// START TRANSACTION, CALL redfence_begin_claim() (migrations 0002 and 0007),
// turns autocommit off and sets completion_type to RELEASE for the session,
// marks the transaction with a savepoint whose name only the Guard knows,
// and then runs the claim, all in one round trip:
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
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
)

// The procedures take the name of the savepoint that marks the
// transaction (newSessionMark), drawn at random for each transaction and
// never used again: fn cannot roll back to it or make it again in a
// transaction of its own, since it does not know the name, and a name seen
// once (in the process list, where the statements that carry it show while
// they run) is of no use for another transaction.
const (
	sqlBeginClaim  = "CALL redfence_begin_claim('%s', X'%s')"
	sqlCommit      = "CALL redfence_commit('%s')"
	sqlCommitRelay = "CALL redfence_commit_relay('%s', '%s')"
	sqlRollback    = "CALL redfence_rollback('%s')"
)

// newSessionMark returns a savepoint name for one transaction: random, so
// that no statement of fn names it by chance.
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
	// answered: the rollback was sent and did not end with the loss of the
	// connection or of its ctx, so no statement of the session still runs
	// on the server (see attemptTx.endUnanswered). ending{}, the rollback
	// not sent because ctx had ended, is not answered.
	answered bool
}

// notClaimingError is commitSession's refusal, with what the rollback that
// followed it found.
type notClaimingError struct {
	err error
	end ending
}

func (e *notClaimingError) Error() string { return e.err.Error() }
func (e *notClaimingError) Unwrap() error { return e.err }

// claimSession claims the fence row of tx's key in stx, the attempt's
// transaction, with tx's token, or with a token the database mints when
// tx's token is 0 (database mode; tx.Token is then set). connID is the
// session's connection id when the transaction is already marked (a relayed
// transaction chained by redfence_commit_chain), or 0: then the claim rides
// with the mark, in one CALL redfence_begin_claim() (migration 0007), which
// answers the connection id. With r, the claim goes in the compound
// statement that also carries r (see ride.go), which marks the session
// either way, and the rows of r's result are returned. It returns the
// connection id, for killOnEnd. While the claim waits for the fence row,
// the end of lctx, or of ctx, ends it on the server (see killOnEnd).
func (g *Guard) claimSession(ctx, lctx context.Context, stx *sqlx.Tx, tx *Tx, connID uint64, r *rideStmt) (uint64, *sqlx.Rows, error) {
	var q fence.Querier = stx
	var bc *beginClaim
	if connID == 0 || r != nil {
		bc = &beginClaim{stx: stx, mark: tx.mark, ride: r}
		q = bc
	}
	wctx, cancel := lctx, context.CancelCauseFunc(nil)
	if ctx != lctx {
		wctx, cancel = context.WithCancelCause(lctx)
		defer cancel(nil)
		defer context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })()
	}
	var stop func(failed bool)
	if connID != 0 {
		stop = g.killOnEnd(wctx, connID, settleGrace, false)
	} else {
		stop = g.killClaimOnEnd(wctx, tx.opID, settleGrace)
	}
	var err error
	if tx.token == 0 {
		tx.token, err = fence.ClaimNextExisting(ctx, q, tx.resource, tx.owner, tx.opID)
	} else {
		err = fence.ClaimExisting(ctx, q, tx.resource, tx.token, tx.owner, tx.opID)
	}
	// A claim that failed without the row's answer may have been ended by
	// the driver for ctx, its server thread still waiting: stop ends that
	// too. One that the row answered waits for nothing.
	failed := err != nil && !rowAnswered(err)
	if failed && cancel != nil && ctx.Err() != nil {
		// The AfterFunc above runs on a goroutine of its own: a claim the
		// driver ended for ctx may return before it has.
		cancel(context.Cause(ctx))
	}
	stop(failed)
	if failed && wctx.Err() != nil {
		err = endedErr(wctx, err)
	}
	if bc == nil {
		return connID, nil, err
	}
	if connID == 0 {
		connID = bc.connID
	}
	if err != nil && bc.rows != nil {
		_ = bc.rows.Close()
		bc.rows = nil
	}
	return connID, bc.rows, err
}

// cutErr tells whether err, a statement's, may have left the statement
// running on the server: the driver ended it for its ctx (closing the
// socket), or the connection was lost.
func cutErr(err error) bool { return ctxErr(err) || fence.IsConnectionLost(err) }

// ctxErr tells whether err says that a ctx ended.
func ctxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// rowAnswered tells whether err is the fence row's answer to a claim.
func rowAnswered(err error) bool {
	return errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrNoFence)
}

// endedErr is err, the error of a claim sent while ctx ended, with ctx's
// cause in front when err does not already say that ctx ended: the KILL
// that ctx's end calls for may close the connection before the driver
// sees ctx end, and err then names the connection ("invalid connection",
// or the server's "connection was killed"), not why.
func endedErr(ctx context.Context, err error) error {
	if ctxErr(err) || errors.Is(err, context.Cause(ctx)) || errors.Is(err, ErrSchemaOutdated) {
		return err
	}
	return fmt.Errorf("%w (%v)", context.Cause(ctx), err)
}

// beginClaim is the fence.Querier a claim goes through when it rides with
// the mark: its first ExecContext sends the claim statement fence built as
// the argument of CALL redfence_begin_claim(), and answers the procedure's
// LAST_INSERT_ID as the result's LastInsertId, which is where fence reads
// the claim's outcome. With ride, that CALL goes in the compound statement
// that carries ride (rideBlock), whose rows are kept, after the claim's
// answer, for ride's result. Everything else goes to the transaction as it
// is.
type beginClaim struct {
	stx    *sqlx.Tx
	mark   string
	ride   *rideStmt
	sent   bool
	connID uint64
	rows   *sqlx.Rows
}

func (b *beginClaim) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if b.sent || len(args) > 0 {
		return b.stx.ExecContext(ctx, query, args...)
	}
	b.sent = true
	if b.ride != nil {
		return b.rideClaim(ctx, query)
	}
	var id uint64
	// The statement goes as a hexadecimal literal, which nothing in it can
	// escape whatever the session's character set or SQL mode.
	call := fmt.Sprintf(sqlBeginClaim, b.mark, hex.EncodeToString([]byte(query)))
	err := b.stx.QueryRowContext(ctx, call).Scan(&b.connID, &id)
	if err != nil {
		return nil, schemaErr(err)
	}
	return claimResult(id), nil
}

// rideClaim sends claim and b.ride in one compound statement, reads the
// claim's answer, and keeps the rows that follow when the claim accepted.
func (b *beginClaim) rideClaim(ctx context.Context, claim string) (sql.Result, error) {
	rows, err := b.stx.QueryxContext(ctx, rideBlock(b.mark, claim, b.ride))
	if err != nil {
		return nil, schemaErr(err)
	}
	var id uint64
	if !rows.Next() {
		err := rows.Err()
		_ = rows.Close()
		if err == nil {
			err = errors.New("guard: the claim answered nothing")
		}
		return nil, schemaErr(err)
	}
	if err := rows.Scan(&b.connID, &id); err != nil {
		_ = rows.Close()
		return nil, err
	}
	if id == fence.ClaimAccepted {
		b.rows = rows
	} else if err := rows.Close(); err != nil {
		return nil, err
	}
	return claimResult(id), nil
}

// schemaErr is err, or ErrSchemaOutdated when err says that a procedure
// is missing.
func schemaErr(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erSPDoesNotExist {
		return fmt.Errorf("%w (%v)", ErrSchemaOutdated, err)
	}
	return err
}

func (b *beginClaim) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return b.stx.QueryRowContext(ctx, query, args...)
}

// claimResult is the result of a claim sent through beginClaim: its
// LAST_INSERT_ID, with the bits of an unsigned 64-bit integer, as the
// driver hands over an OK packet's.
type claimResult uint64

func (r claimResult) LastInsertId() (int64, error) { return int64(r), nil }
func (r claimResult) RowsAffected() (int64, error) {
	return 0, errors.New("guard: a claim's affected rows are not reported")
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
//
// stop(failed) with failed set also sends the KILL when ctx has ended
// and the KILL has not started yet (see onEnd): for a statement that ctx
// ends in the driver, and that returned an error that may be that end.
func (g *Guard) killOnEnd(ctx context.Context, connID uint64, timeout time.Duration, query bool) (stop func(failed bool)) {
	if connID == 0 {
		return func(bool) {}
	}
	return onEnd(ctx, timeout, func(kctx context.Context, _ func()) { g.kill(kctx, connID, query) })
}

// kill ends the server thread of connection id (KILL), or with query only
// the statement it runs (KILL QUERY), from another connection of the pool.
// An id that ended already is no error worth reporting.
func (g *Guard) kill(ctx context.Context, id uint64, query bool) {
	kill := "KILL "
	if query {
		kill = "KILL QUERY "
	}
	_, _ = g.db.ExecContext(ctx, kill+strconv.FormatUint(id, 10))
}

// claimSearchWait is the last interval between two searches of
// killClaimOnEnd: 5, 10, ... 80ms, the last search about 150ms after the
// first.
const claimSearchWait = 80 * time.Millisecond

// killClaimOnEnd is killOnEnd for a claim sent before its session's
// connection id is known (see claimSession): the end of ctx ends the server
// thread whose running statement holds opID, the attempt's operation id,
// which only its claim holds. The thread shows either the claim statement
// (an UPDATE of the fence table with opID in hexadecimal) or the CALL
// around it (that text in hexadecimal once more); a thread of the same
// user can see it without the PROCESS privilege.
//
// The claim may reach the server after the caller gave up (a slow network,
// a busy server), so the search goes on at growing intervals, for about
// 150ms (claimSearchWait) or until it found the thread, also after stop,
// which waits for the first search (and its KILL) only. Only the claim
// shows opID, so a late KILL can end nothing else. A claim that arrives
// later still waits until innodb_lock_wait_timeout, and, should the fence
// row come free first, holds it until the server finds its client gone.
func (g *Guard) killClaimOnEnd(ctx context.Context, opID string, timeout time.Duration) (stop func(failed bool)) {
	inner := hex.EncodeToString([]byte(opID))
	outer := hex.EncodeToString([]byte(inner))
	find := "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()" +
		" AND (INFO LIKE 'UPDATE " + fence.Table + " SET %" + inner + "%'" +
		" OR INFO LIKE 'CALL redfence_begin_claim(%" + outer + "%'" +
		" OR INFO LIKE 'BEGIN NOT ATOMIC %redfence_begin_claim(%" + outer + "%')"
	return onEnd(ctx, timeout, func(kctx context.Context, settled func()) {
		for wait := 5 * time.Millisecond; ; wait *= 2 {
			var ids []uint64
			_ = g.db.SelectContext(kctx, &ids, find)
			for _, id := range ids {
				g.kill(kctx, id, false)
			}
			settled() // stop need not wait for the searches that follow
			if len(ids) > 0 || wait > claimSearchWait || sleep(kctx, wait) != nil {
				return
			}
		}
	})
}

// onEnd runs kill when ctx ends, on a ctx of its own bounded by timeout,
// until stop is called. stop returns once a kill under way has ended, or
// has called settled to say that what follows may go on without stop.
//
// stop(true) also runs kill when ctx has ended but kill has not started.
// The driver ends a statement when ctx is done, and ctx's AfterFunc
// functions run only after that, so a statement ended for ctx can return,
// and its caller call stop, before kill has started: its server thread
// would be left waiting. stop(false) is for a statement that did not fail
// (nothing waits), or whose ctx the driver does not watch (a batch
// member's, see Tx.stmtCtx, which returns only when done): there a late
// KILL QUERY could end the next statement.
func onEnd(ctx context.Context, timeout time.Duration, kill func(kctx context.Context, settled func())) (stop func(failed bool)) {
	done := make(chan struct{})
	var settle sync.Once
	settled := func() { settle.Do(func() { close(done) }) }
	run := func() {
		defer settled()
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		kill(kctx, settled)
	}
	after := context.AfterFunc(ctx, run)
	var once sync.Once
	return func(failed bool) {
		once.Do(func() {
			if after() {
				if !failed || ctx.Err() == nil {
					return
				}
				go run()
			}
			<-done
		})
	}
}

// commitSession commits stx if it is still the transaction claimSession
// marked with the savepoint mark. With next, it commits with COMMIT AND
// CHAIN, and marks the new transaction with next. A refusal because it is
// not the claiming transaction comes back as an error wrapping
// errNotClaimingTx, with nothing committed; the session is still in the
// state claimSession set, for rollbackSession to restore.
func commitSession(ctx context.Context, stx *sqlx.Tx, mark, next string) error {
	q := fmt.Sprintf(sqlCommit, mark)
	if next != "" {
		q = fmt.Sprintf(sqlCommitRelay, mark, next)
	}
	_, err := stx.ExecContext(ctx, q)
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
		return ending{answered: !cutErr(err)}, err
	}
	return ending{gone: gone == 1, autocommit: autocommit == 1, answered: true}, nil
}
