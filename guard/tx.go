package guard

// tx.go owns Tx, the transaction fn receives: its statements, bound to
// the call's ctx and refused once fn has returned, and the failures they
// report to the attempt.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/errs"
)

// Tx is the transaction fn runs in. It is a *sqlx.Tx whose first statement
// claimed the key's fence row with the lock's token, so every statement fn
// runs on it is ordered after the previous holders' commits and before the
// next holders'. Commit and Rollback belong to Do.
//
// What keeps fn inside the fenced transaction is the server, not the text of
// fn's statements. While the transaction is open, the session runs with
// autocommit off and completion_type RELEASE, and Do commits only after the
// server has shown that the transaction is still the one that claimed (a
// savepoint set when it began still exists); see the migrations that create
// the redfence_* procedures. Whatever fn runs, through Tx, the embedded
// *sqlx.Tx, Unsafe, a prepared or bound statement, a procedure, or several
// statements in one text:
//   - nothing fn runs after the transaction has ended commits on its own:
//     after a rollback by the server (a deadlock reported only through
//     rows.Err, say) or an implicit commit (DDL, and forms nobody listed),
//     fn's next statements open another transaction, which Do rolls back;
//   - a COMMIT or ROLLBACK fn sends, in any form, also ends the session:
//     fn's later statements fail;
//   - Do returns nil only if the transaction that claimed is the one that
//     committed. Otherwise it reads the fence row: if the claiming
//     transaction committed (with what fn did until it ended), Do returns
//     [ErrImplicitCommit] and never runs fn again; if it was rolled back,
//     nothing of the attempt applied, and Do runs fn again when fn returned
//     nil or a deadlock-class error, or returns [ErrNotCommitted]; when the
//     row cannot tell (two newer holders have claimed it since), Do returns
//     [ErrOutcomeUnknown].
//
// One thing no session setting can keep out: fn may switch autocommit back
// on itself (a SET that Tx's text checks below do not recognise, or one run
// from dynamic SQL). That commits the claiming transaction, and fn's later
// statements then commit on their own, outside the fence. Do cannot stop
// them, but it is not deceived: it returns [ErrImplicitCommit], or
// [ErrOutcomeUnknown] when the server had rolled the claiming transaction
// back first, saying that fn's later statements may have committed, and
// never runs fn again. (An fn that switches autocommit on and off again
// after a rollback it did not notice is the one case Do cannot see: keep
// session settings out of fn.)
//
// On top of that, Tx's statement methods (Exec, Query, QueryRow, Get,
// Select, NamedExec, Prepare and their Context, x and Named forms) give
// early, clear errors:
//   - A statement that would plainly end the transaction (START
//     TRANSACTION, BEGIN, COMMIT, ROLLBACK, DDL such as CREATE TABLE, LOCK
//     TABLES, SET autocommit, account management) is refused with
//     [ErrImplicitCommit] before it is sent. A CREATE or DROP of a
//     TEMPORARY table is allowed.
//   - A statement whose effect the text does not show (CALL, EXECUTE, a
//     compound statement) runs inside a savepoint that Tx checks
//     afterwards, so that fn learns at once when it ended the transaction.
//   - After a deadlock, a lock wait timeout, a write conflict under
//     snapshot isolation (1020) or a lost connection, later statements are
//     refused with that error, and Do runs the whole transaction again when
//     fn returns that error or nil (after proving from the server that
//     nothing of the attempt committed).
//   - After any other server error, except a few that are known to undo the
//     statement only (duplicate key, foreign key, NULL, syntax, unknown
//     table or column), the next statement first checks that the
//     transaction is still open, and is refused with [ErrNotCommitted] when
//     it is not.
//   - Once fn has returned, its statements are refused with an error
//     wrapping sql.ErrTxDone, and the statements it prepared are closed
//     (when relayed, the underlying transaction lives on, chained, as the
//     next caller's).
//
// Statements run through the embedded *sqlx.Tx, Unsafe, or statements fn
// prepared or bound get none of these early errors (their failures reach
// Do only when fn returns them), but the guarantees above hold for them
// too. Never use any of them after fn has returned. With
// Options.ClaimWithFirstStatement the embedded *sqlx.Tx is a closed
// transaction (sql.ErrTxDone) until fn's first statement through Tx's own
// methods has claimed.
type Tx struct {
	*sqlx.Tx

	key      string
	resource string // the fence row's resource
	token    uint64
	owner    string
	opID     string
	mark     string // the savepoint that marks the transaction (see session.go)
	attempt  int

	// txState is the transaction's, shared by the Tx of every member of a
	// batch (see forMember). A Tx made outside Do (&Tx{Tx: tx}, as in tests
	// of fn) gets its own on first use (init).
	*txState
	initOnce sync.Once

	// ended is set when Do is done with this Tx: when fn returns (for a
	// batch member, its own fn), and before the transaction commits or
	// rolls back. The *sqlx.Tx may live on (a batch's next member, a
	// relayed transaction chained to the next caller), so statements of
	// this Tx kept past fn are refused here, and the statements fn prepared
	// are closed, as database/sql would at the end of the transaction.
	// batchCtx, on a batch member's Tx, is the batch's: it, not the
	// member's ctx, bounds the member's statements (see stmtCtx). kills
	// are the member's KILL QUERY watches, stopped when it finishes.
	batchCtx context.Context
	kills    []func()

	// first is the outcome of the Read fn begins with, when it went with
	// the claim (see read.go), until fn's wrapper takes it.
	first *firstRead

	ended    atomic.Bool
	prepared struct {
		sync.Mutex
		v []io.Closer
	}
}

// txState is what Tx knows of the transaction itself.
type txState struct {
	savepoints atomic.Int64 // names of nested savepoints

	// failed records the first failure that makes the transaction unusable:
	// a retryable error of its own connection, or a statement that ended
	// it. Later statements are refused with it, and Do does not commit.
	failed atomic.Pointer[txFailure]
	// onFail, when set (the lock was handed on at the claim), is told the
	// first failure: the transaction, and with it the fence row's lock, is
	// gone.
	onFail func(error)
	// memberFail, in a batch whose lock was handed on, ends the ctx of the
	// member whose fn runs, as onFail ends the batch's: at once, before the
	// failing statement returns.
	memberFail atomic.Pointer[context.CancelCauseFunc]

	// suspect is a server error of one of fn's statements that may have
	// rolled the whole transaction back (one Tx does not know as ending
	// only the statement). Before the next statement, and before COMMIT,
	// Tx checks that the claim still holds the fence row (confirm).
	suspect atomic.Pointer[error]
	// settleLost, when set, tells on a fresh connection whether the
	// transaction committed, after its connection was lost (Guard.settle).
	settleLost func(context.Context) (committed bool, err error)
	// cut is set when a statement of fn ended in a way that may have left
	// it running on the server (cutErr): see attemptTx.endUnanswered.
	cut atomic.Bool
	// killQuery, in a batch, makes the end of a member's ctx end the
	// member's statement then running on the server (see stmtCtx).
	killQuery func(ctx context.Context) (stop func())

	// claim is the claim, when it rides with fn's first statement (see
	// ride.go).
	claim txClaim

	// check guards the savepoint that opaque statements run under.
	check struct {
		sync.Mutex
		armed   bool  // the savepoint exists (as far as Tx knows)
		pending bool  // Do must verify it before COMMIT
		after   int64 // value of savepoints when it was set
		query   bool  // pending for an opaque statement run through a Query form (settleQuery)
	}
}

// stmtCtx returns the ctx a statement of fn runs on: ctx itself, except for
// a batch member's Tx, where the statement must not be cut short by the
// member's ctx. The driver ends a statement whose ctx ends by closing the
// connection, which would end the transaction of every member, and count
// against the batch's attempts. A member's statement therefore runs on a
// ctx with ctx's values that ends only with the batch (batchCtx); once the
// member's ctx has ended, fn gets it at its next check, its next statement
// is refused without touching the connection (database/sql checks ctx
// first), and the batch undoes the member's work alone. done releases
// what the ctx holds.
func (t *Tx) stmtCtx(ctx context.Context, rows bool) (_ context.Context, done func(error) error) {
	t.init()
	if t.batchCtx == nil || ctx.Err() != nil {
		return ctx, func(err error) error { return err }
	}
	c, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(t.batchCtx, func() { cancel(context.Cause(t.batchCtx)) })
	stopKill := func() {}
	if t.killQuery != nil {
		stopKill = t.killQuery(ctx)
		if rows {
			// The rows outlive the call: stopped when the member finishes.
			t.prepared.Lock()
			t.kills = append(t.kills, stopKill)
			t.prepared.Unlock()
		}
	}
	return c, func(err error) error {
		stopKill()
		stop()
		cancel(nil)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == erQueryInterrupted && ctx.Err() != nil {
			// Ended because the member's ctx ended: say so, as the driver
			// would have.
			return fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return err
	}
}

// init gives a Tx made outside Do its state.
func (t *Tx) init() {
	t.initOnce.Do(func() {
		if t.txState == nil {
			t.txState = &txState{}
		}
	})
}

// newTx returns the Tx of an attempt's transaction stx.
func newTx(stx *sqlx.Tx, key, resource string, token uint64, owner string, attempt int) *Tx {
	return &Tx{Tx: stx, key: key, resource: resource, token: token, owner: owner, opID: newOpID(), attempt: attempt, txState: &txState{}}
}

// forMember returns a Tx of the same transaction for one member of a
// batch: its statements are refused once it is finished (when the member's
// fn returns), while the transaction goes on for the next member.
func (t *Tx) forMember() *Tx {
	return &Tx{Tx: t.Tx, key: t.key, resource: t.resource, token: t.token, owner: t.owner, opID: t.opID, mark: t.mark, attempt: t.attempt, txState: t.txState}
}

type txFailure struct {
	err   error
	retry bool  // the server rolled back: running the attempt again is safe
	first error // the failure onFail was told of (err, unless failFinally replaced it)
}

const checkSavepoint = "redfence_check"

// Key returns the key Do locked and fenced.
func (t *Tx) Key() string { return t.key }

// Token returns the fencing token the transaction claimed the key with. It
// grows with every new holder of the key and stays the same across the
// attempts of one Do and in nested calls that join it.
func (t *Tx) Token() uint64 { return t.token }

// Owner returns the lock owner identity recorded in the fence row.
func (t *Tx) Owner() string { return t.owner }

// OpID returns the operation id written into the fence row by this attempt's
// claim; Do reads it back to settle a COMMIT whose reply was lost. It is
// unique per attempt.
func (t *Tx) OpID() string { return t.opID }

// Attempt returns which attempt of the transaction this is, from 1. fn runs
// again with a higher attempt after a retryable failure.
func (t *Tx) Attempt() int { return t.attempt }

// Commit refuses with [ErrTxManaged]: Do commits when fn returns nil.
func (t *Tx) Commit() error { return ErrTxManaged }

// Rollback refuses with [ErrTxManaged]: Do rolls back when fn returns an
// error.
func (t *Tx) Rollback() error { return ErrTxManaged }

// fail records the failure that makes the transaction unusable; the first
// one wins.
func (t *Tx) fail(err error, retry bool) {
	if t.failed.CompareAndSwap(nil, &txFailure{err: err, retry: retry, first: err}) && t.onFail != nil {
		t.onFail(err)
		if f := t.memberFail.Load(); f != nil {
			(*f)(err)
		}
	}
}

// keep records a statement prepared on the transaction, for finish to close.
// Its executions run unseen by Tx.
func (t *Tx) keep(st io.Closer) {
	t.prepared.Lock()
	defer t.prepared.Unlock()
	if t.ended.Load() {
		_ = st.Close()
		return
	}
	t.prepared.v = append(t.prepared.v, st)
}

// finish marks the Tx as done with and closes the statements fn prepared.
// It may be called more than once.
func (t *Tx) finish() {
	t.prepared.Lock()
	t.ended.Store(true)
	v, kills := t.prepared.v, t.kills
	t.prepared.v, t.kills = nil, nil
	t.prepared.Unlock()
	for _, st := range v {
		_ = st.Close()
	}
	for _, stop := range kills {
		stop()
	}
}

// failure returns the recorded failure, or nil.
func (t *Tx) failure() *txFailure { return t.failed.Load() }

// observe records err when it says the server rolled the transaction (or,
// for a lock wait timeout, the statement) back, or the connection is gone.
// Only errors of this transaction's own statements pass through here, so
// an error of fn's own making, or of another transaction, is never taken
// for one of these.
func (t *Tx) observe(err error) error {
	if err == nil {
		return nil
	}
	t.init()
	if cutErr(err) {
		t.cut.Store(true)
	}
	// A deadlock or a lost connection rolled the transaction back; a lock
	// wait timeout rolled back the statement (or, with
	// innodb_rollback_on_timeout, the transaction). Either way statements
	// that follow must not run in it.
	if fence.Retryable(err) {
		t.fail(err, true)
		return err
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && !statementOnly(me.Number) && t.failure() == nil {
		t.suspect.Store(&err)
	}
	return err
}

// statementOnly reports whether a server error of number n is known to undo
// only the statement that got it, never the transaction: fn may go on from
// it without Tx checking the transaction. The common ones; any other makes
// Tx check.
func statementOnly(n uint16) bool {
	switch n {
	case 1062, 1586, // ER_DUP_ENTRY, ER_DUP_ENTRY_WITH_KEY_NAME
		1451, 1452, // ER_ROW_IS_REFERENCED_2, ER_NO_REFERENCED_ROW_2
		1048, 1364, // ER_BAD_NULL_ERROR, ER_NO_DEFAULT_FOR_FIELD
		1054, 1064, 1146, // ER_BAD_FIELD_ERROR, ER_PARSE_ERROR, ER_NO_SUCH_TABLE
		erNoSuchSavepoint,
		erQueryInterrupted, // KILL QUERY, a batch member that left (stmtCtx)
		3572:               // ER_LOCK_NOWAIT (MySQL; MariaDB reports NOWAIT as 1205, a lock wait timeout, which fails the attempt and is retried)
		return true
	}
	return false
}

// confirm checks, after a server error that may have rolled the whole
// transaction back (see suspect), that the transaction is still open: that
// its claim still holds the fence row. Inside the transaction the row shows
// the claim's operation id; when the server rolled it back, the read runs on
// its own and shows someone else's. Nothing has run since the error, so
// nothing ran outside the fence: the attempt fails with ErrNotCommitted.
func (t *Tx) confirm(ctx context.Context) error {
	p := t.suspect.Swap(nil)
	if p == nil {
		return nil
	}
	f, err := fence.Lookup(ctx, t.Tx, t.resource)
	switch {
	case err == nil && f.OpID == t.opID:
		return nil
	case err != nil && !errors.Is(err, fence.ErrNoFence):
		err = fmt.Errorf("guard: %q: check that the transaction is still open after %w: %w", t.key, *p, err)
		if fence.Retryable(err) {
			t.fail(err, true) // the connection is gone, and the transaction with it
		} else {
			t.suspect.CompareAndSwap(nil, p) // not known yet: look again next time
		}
		return err
	}
	ferr := fmt.Errorf("guard: %q: %w: the server rolled the transaction back: %w", t.key, ErrNotCommitted, *p)
	t.fail(ferr, false)
	return ferr
}

// checkTimeout bounds a check of the transaction when fn's ctx has no
// deadline.
const checkTimeout = 10 * time.Second

const (
	erQueryInterrupted = 1317             // ER_QUERY_INTERRUPTED
	erUnsupportedPS    = 1295             // ER_UNSUPPORTED_PS: cannot run as a prepared statement
	erSPBadStatement   = 1314             // ER_SP_BADSTATEMENT: not allowed in a stored program
	erNoSuchSavepoint  = erSPDoesNotExist // "SAVEPOINT x does not exist"
	implicitCommitNote = "a statement in fn ended the fenced transaction"
)

// before vets query before it is sent, and sends the claim first if it is
// still to be sent (see ride.go). It returns an error when the statement
// must not run, and whether the statement is opaque and must be checked
// afterwards.
func (t *Tx) before(ctx context.Context, query string) (opaque bool, err error) {
	if err := t.vet(ctx); err != nil {
		return false, err
	}
	if err := t.sendClaim(ctx); err != nil {
		return false, err
	}
	switch classify(query) {
	case stmtEnds:
		err := fmt.Errorf("%w: %q would end the transaction", ErrImplicitCommit, abbreviate(query))
		t.fail(err, false)
		return false, err
	case stmtOpaque:
		return true, t.arm(ctx)
	}
	return false, nil
}

// vet refuses a statement of fn when the transaction is no longer usable.
func (t *Tx) vet(ctx context.Context) error {
	t.init()
	if t.ended.Load() {
		return fmt.Errorf("guard: %q: %w", t.key, sql.ErrTxDone)
	}
	// An opaque statement run through a Query form is checked here, before
	// the next statement: its own call could not (a *sql.Row reports its
	// error only to Scan).
	if err := t.settleQuery(ctx); err != nil && t.failure() == nil {
		return err
	}
	if err := t.confirm(ctx); err != nil && t.failure() == nil {
		return err
	}
	if f := t.failure(); f != nil {
		return fmt.Errorf("guard: %q: transaction no longer usable: %w", t.key, f.err)
	}
	return nil
}

// arm sets the check savepoint unless it is already set. A statement that
// ends the transaction destroys it with the transaction.
func (t *Tx) arm(ctx context.Context) error {
	t.check.Lock()
	defer t.check.Unlock()
	if !t.check.armed {
		if _, err := t.Tx.ExecContext(ctx, "SAVEPOINT "+checkSavepoint); err != nil {
			return t.observe(fmt.Errorf("guard: %q: savepoint before a statement that may end the transaction: %w", t.key, err))
		}
		t.check.armed = true
		t.check.after = t.savepoints.Load()
	}
	t.check.pending = true
	return nil
}

// verify settles the check of an opaque statement that succeeded, if one is
// pending (settleOpaque), then reads the fence row if Tx must (confirm). It
// is called after an opaque Exec, after each member of a batch and by Do
// before COMMIT.
func (t *Tx) verify(ctx context.Context) error {
	if err := t.settleOpaque(ctx, false); err != nil {
		return err
	}
	return t.confirm(ctx)
}

// ranOpaqueQuery records that an opaque statement ran through a Query form,
// whose error the call cannot always see: its check is settled before the
// next statement (settleQuery). Recorded once the statement has run, so
// that another goroutine's statement never takes the check from a
// statement that is still to run.
func (t *Tx) ranOpaqueQuery() {
	t.check.Lock()
	t.check.query = t.check.pending
	t.check.Unlock()
}

// settleOpaque runs the pending check of an opaque statement: after it
// failed (failed), after it succeeded (verify), and, for one run through a
// Query form, before the next statement and when fn returns. Such a
// statement may have ended the transaction before failing (a procedure that
// commits, or rolls back, and then meets an error or signals one), and its
// error may be one that Do retries. So when the check savepoint is gone, the
// fence row tells what happened: a claim that committed makes the attempt
// fail for good with ErrImplicitCommit (Do never reruns work that
// committed), a rolled-back one leaves a retryable failure as it is and
// refuses fn's next statements otherwise. A connection lost meanwhile is
// settled as a lost COMMIT is, on a fresh connection (settleLost). When none
// of that can tell, the outcome is unknown. It runs after fn's ctx has
// ended too (a failure of the transaction ends it), for settleGrace at most
// on this connection.
//
// The row is read on the transaction's own connection: a claim it shows
// committed may also be the transaction still open, when the statement
// destroyed the check savepoint without ending it (a ROLLBACK TO a
// savepoint of fn's set before it); that reads as a commit, and fails the
// attempt for good all the same.
func (t *Tx) settleOpaque(ctx context.Context, failed bool) error {
	t.check.Lock()
	defer t.check.Unlock()
	if !t.check.pending {
		return nil
	}
	t.check.pending, t.check.armed, t.check.query = false, false, false
	// Not cut short by fn's ctx ending (a failure of the transaction, a lost
	// lock ends it): bounded by its deadline, if any, and settleGrace.
	bound := checkTimeout
	if dl, ok := ctx.Deadline(); ok {
		bound = max(time.Until(dl), 0)
	}
	if ctx.Err() != nil {
		bound = 0
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound+settleGrace)
	defer cancel()
	_, err := t.Tx.ExecContext(sctx, "RELEASE SAVEPOINT "+checkSavepoint)
	if err == nil {
		return nil // still open: the error was the statement's own
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != erNoSuchSavepoint {
		return t.uncheckable(ctx, err)
	}
	return t.settleByRow(sctx, failed)
}

// uncheckable settles a transaction whose check savepoint could not be
// released (err, not a missing savepoint): on a lost connection, as a lost
// COMMIT is (settleLost); otherwise its outcome is unknown.
func (t *Tx) uncheckable(ctx context.Context, err error) error {
	// sql.ErrTxDone: database/sql ended the transaction when the caller's
	// ctx ended, dropping its connection.
	lost := fence.IsConnectionLost(err) || errors.Is(err, sql.ErrTxDone)
	if lost && t.settleLost != nil {
		committed, serr := t.settleLost(ctx)
		switch {
		case serr == nil && !committed:
			// The server rolled it back with the connection: as any lost
			// connection, the attempt may run again.
			lerr := fmt.Errorf("guard: %q: check that the transaction is still open: %w", t.key, err)
			if t.failure() == nil {
				t.fail(lerr, true)
			}
			return lerr
		case serr == nil:
			return t.failFinally(t.endedErr("what it wrote before that committed with the claim"))
		}
		err = fmt.Errorf("%v (settling: %v)", err, serr)
	}
	return t.failFinally(fmt.Errorf("guard: %q: %w: %w, and checking the transaction failed: %v",
		t.key, ErrOutcomeUnknown, errMayHaveEnded, err))
}

// settleByRow settles a transaction whose check savepoint is gone, from
// the fence row read on its own connection (see settleOpaque): failed says
// that the statement that ended it failed.
func (t *Tx) settleByRow(ctx context.Context, failed bool) error {
	f, err := fence.Lookup(ctx, t.Tx, t.resource)
	switch {
	case err == nil && f.OpID == t.opID:
		return t.failFinally(t.endedErr("what it wrote before that committed with the claim, what ran after it ran outside the fence"))
	case err == nil && f.Token > t.token:
		// A newer holder has claimed the key since: the row no longer tells.
		return t.failFinally(fmt.Errorf("guard: %q: %w: %w, and %w (token %d, ours %d)",
			t.key, ErrOutcomeUnknown, errMayHaveEnded, errUnsettled, f.Token, t.token))
	case err != nil && !errors.Is(err, fence.ErrNoFence):
		return t.failFinally(fmt.Errorf("guard: %q: %w: %w, and reading the fence row failed: %v",
			t.key, ErrOutcomeUnknown, errMayHaveEnded, err))
	}
	// Rolled back.
	if !failed {
		// By a statement that then went on: what it ran after that ran
		// outside the fence.
		return t.failFinally(t.endedErr("it rolled it back; what ran after that ran outside the fence"))
	}
	rerr := fmt.Errorf("guard: %q: %w: a statement fn ran rolled the transaction back", t.key, ErrNotCommitted)
	if t.failure() == nil {
		t.fail(rerr, false)
	}
	return rerr
}

// endedErr is the failure of a transaction a statement of fn ended, with
// what that means for fn's work.
func (t *Tx) endedErr(meaning string) error {
	return fmt.Errorf("guard: %q: %w: %s; %s", t.key, ErrImplicitCommit, implicitCommitNote, meaning)
}

// errMayHaveEnded marks an outcome error for a transaction a statement may
// have ended, committing what ran before it (see failBatch).
var errMayHaveEnded = errors.New("an opaque statement fn ran (CALL or the like) may have ended the fenced transaction")

// settleQuery settles the check of an opaque statement run through a Query
// form, if one is pending; a check armed by Prepare is left to verify.
func (t *Tx) settleQuery(ctx context.Context) error {
	t.check.Lock()
	query := t.check.query
	t.check.Unlock()
	if !query {
		return nil
	}
	return t.settleOpaque(ctx, true)
}

// settleAfterFn settles, once fn has returned with fnErr, what its own calls
// could not: the check of an opaque statement run through a Query form
// that failed (it may have ended the transaction first: never run work that
// committed again), and, when fnErr is not the transaction's own failure,
// whether it was an error of a statement Tx does not see that rolled the
// transaction back before fn ran more of them.
func (t *Tx) settleAfterFn(ctx context.Context, fnErr error) {
	if fnErr != nil || t.failure() != nil {
		_ = t.settleOpaque(ctx, true)
	}
	if fnErr != nil && t.failure() == nil {
		_ = t.confirm(ctx)
	}
}

// failFinally records err as the transaction's failure, replacing any
// recorded one (a retryable one above all): the attempt must not run again.
func (t *Tx) failFinally(err error) error {
	t.fail(err, false)
	first := t.failed.Load().first
	t.failed.Store(&txFailure{err: err, first: first})
	return err
}

// withStatementErr returns outcome, an error Do may return as its verdict,
// with err (a statement's or fn's) attached. err keeps its identity for
// errors.Is, unless it would make the verdict look like a deadlock or a lost
// connection to a caller that retries on those: then it is attached as text.
func withStatementErr(outcome, err error) error {
	if err == nil || errors.Is(err, outcome) {
		return outcome
	}
	if fence.Retryable(err) || fence.IsConnectionLost(err) {
		return fmt.Errorf("%w (%v)", outcome, err)
	}
	return errs.Join(outcome, err)
}

// rolledBackTo tells Tx that the nested savepoint number n was rolled back
// to, which destroys the check savepoint if it was set after it.
func (t *Tx) rolledBackTo(n int64) {
	t.check.Lock()
	defer t.check.Unlock()
	if t.check.armed && t.check.after >= n {
		t.check.armed, t.check.pending, t.check.query = false, false, false
	}
}

// after finishes an Exec: an opaque statement is verified at once, so that
// statements after it cannot run outside a transaction it ended.
func (t *Tx) afterExec(ctx context.Context, opaque bool, err error) error {
	if err != nil {
		err = t.observe(err)
		if opaque {
			if verr := t.settleOpaque(ctx, true); verr != nil {
				if f := t.failure(); f != nil && f.retry {
					return err // rolled back: the statement's own error stands, and Do runs the attempt again
				}
				return withStatementErr(verr, err)
			}
		}
		return err
	}
	if opaque {
		return t.verify(ctx)
	}
	return nil
}

func abbreviate(q string) string {
	const max = 60
	if len(q) > max {
		return q[:max] + "…"
	}
	return q
}

// refusedCtx returns a cancelled ctx, for a refused statement that must
// return a row: database/sql offers no way to make a *sql.Row carry an error
// of its own, so the statement runs on a cancelled context, is never sent,
// and the row's Scan fails. The error Do returns names the reason.
func refusedCtx(ctx context.Context) context.Context {
	c, cancel := context.WithCancel(ctx)
	cancel()
	return c
}

// ExecContext runs query in the transaction; see [Tx] for what is refused.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (_ sql.Result, err error) {
	ctx, done := t.stmtCtx(ctx, false)
	defer func() { err = done(err) }()
	if res, rode, err := t.rideExec(ctx, query, args); rode {
		return res, err
	}
	opaque, err := t.before(ctx, query)
	if err != nil {
		return nil, err
	}
	res, err := t.Tx.ExecContext(ctx, query, args...)
	if err = t.afterExec(ctx, opaque, err); err != nil {
		return nil, err
	}
	return res, nil
}

// Exec is ExecContext with context.Background.
func (t *Tx) Exec(query string, args ...any) (sql.Result, error) {
	return t.ExecContext(context.Background(), query, args...)
}

// MustExecContext is ExecContext that panics on error.
func (t *Tx) MustExecContext(ctx context.Context, query string, args ...any) sql.Result {
	res, err := t.ExecContext(ctx, query, args...)
	if err != nil {
		panic(err)
	}
	return res
}

// MustExec is MustExecContext with context.Background.
func (t *Tx) MustExec(query string, args ...any) sql.Result {
	return t.MustExecContext(context.Background(), query, args...)
}

// QueryContext runs query in the transaction; see [Tx] for what is refused.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx, _ = t.stmtCtx(ctx, true) // released with the batch: the rows outlive the call
	if rows, rode, err := t.ride(ctx, query, args, false); rode {
		if err != nil {
			return nil, err
		}
		return rows.Rows, nil
	}
	opaque, err := t.before(ctx, query)
	if err != nil {
		return nil, err
	}
	if opaque {
		defer t.ranOpaqueQuery()
	}
	rows, err := t.Tx.QueryContext(ctx, query, args...)
	return rows, t.observe(err)
}

// Query is QueryContext with context.Background.
func (t *Tx) Query(query string, args ...any) (*sql.Rows, error) {
	return t.QueryContext(context.Background(), query, args...)
}

// QueryxContext is QueryContext returning *sqlx.Rows.
func (t *Tx) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	ctx, _ = t.stmtCtx(ctx, true) // released with the batch: the rows outlive the call
	if rows, rode, err := t.ride(ctx, query, args, false); rode {
		if err != nil {
			return nil, err
		}
		return rows, nil
	}
	opaque, err := t.before(ctx, query)
	if err != nil {
		return nil, err
	}
	if opaque {
		defer t.ranOpaqueQuery()
	}
	rows, err := t.Tx.QueryxContext(ctx, query, args...)
	return rows, t.observe(err)
}

// Queryx is QueryxContext with context.Background.
func (t *Tx) Queryx(query string, args ...any) (*sqlx.Rows, error) {
	return t.QueryxContext(context.Background(), query, args...)
}

// QueryRowContext runs a query expected to return at most one row. A refused
// statement is not sent, and the row's Scan fails; Do returns the reason.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	ctx, _ = t.stmtCtx(ctx, true) // released with the batch: the rows outlive the call
	opaque, err := t.before(ctx, query)
	if err != nil {
		return t.Tx.QueryRowContext(refusedCtx(ctx), query, args...)
	}
	if opaque {
		defer t.ranOpaqueQuery()
	}
	row := t.Tx.QueryRowContext(ctx, query, args...)
	_ = t.observe(row.Err()) // the row's Scan returns the error to fn
	return row
}

// QueryRow is QueryRowContext with context.Background.
func (t *Tx) QueryRow(query string, args ...any) *sql.Row {
	return t.QueryRowContext(context.Background(), query, args...)
}

// QueryRowxContext is QueryRowContext returning *sqlx.Row.
func (t *Tx) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	ctx, _ = t.stmtCtx(ctx, true) // released with the batch: the rows outlive the call
	opaque, err := t.before(ctx, query)
	if err != nil {
		return t.Tx.QueryRowxContext(refusedCtx(ctx), query, args...)
	}
	if opaque {
		defer t.ranOpaqueQuery()
	}
	row := t.Tx.QueryRowxContext(ctx, query, args...)
	_ = t.observe(row.Err()) // the row's Scan returns the error to fn
	return row
}

// QueryRowx is QueryRowxContext with context.Background.
func (t *Tx) QueryRowx(query string, args ...any) *sqlx.Row {
	return t.QueryRowxContext(context.Background(), query, args...)
}

// GetContext scans one row of query into dest (see sqlx.GetContext).
func (t *Tx) GetContext(ctx context.Context, dest any, query string, args ...any) (err error) {
	ctx, done := t.stmtCtx(ctx, false)
	defer func() { err = done(err) }()
	if rows, rode, err := t.ride(ctx, query, args, false); rode {
		if err != nil {
			return err
		}
		return t.observe(scanOne(rows, dest))
	}
	opaque, err := t.before(ctx, query)
	if err != nil {
		return err
	}
	if opaque {
		defer t.ranOpaqueQuery()
	}
	return t.observe(t.Tx.GetContext(ctx, dest, query, args...))
}

// Get is GetContext with context.Background.
func (t *Tx) Get(dest any, query string, args ...any) error {
	return t.GetContext(context.Background(), dest, query, args...)
}

// SelectContext scans the rows of query into dest (see sqlx.SelectContext).
func (t *Tx) SelectContext(ctx context.Context, dest any, query string, args ...any) (err error) {
	ctx, done := t.stmtCtx(ctx, false)
	defer func() { err = done(err) }()
	if rows, set, rode, err := t.rideSet(ctx, query, args, false); rode {
		switch {
		case err != nil:
			return err
		case !set: // SELECT … INTO: as sqlx reads its answer, no rows
			return selectNone(dest)
		}
		return t.observe(sqlx.SelectContext(ctx, riddenRows{rows}, dest, query, args...))
	}
	opaque, err := t.before(ctx, query)
	if err != nil {
		return err
	}
	if opaque {
		defer t.ranOpaqueQuery()
	}
	return t.observe(t.Tx.SelectContext(ctx, dest, query, args...))
}

// Select is SelectContext with context.Background.
func (t *Tx) Select(dest any, query string, args ...any) error {
	return t.SelectContext(context.Background(), dest, query, args...)
}

// NamedExecContext runs a query with named parameters (see
// sqlx.NamedExecContext).
func (t *Tx) NamedExecContext(ctx context.Context, query string, arg any) (_ sql.Result, err error) {
	ctx, done := t.stmtCtx(ctx, false)
	defer func() { err = done(err) }()
	opaque, err := t.before(ctx, query)
	if err != nil {
		return nil, err
	}
	res, err := t.Tx.NamedExecContext(ctx, query, arg)
	if err = t.afterExec(ctx, opaque, err); err != nil {
		return nil, err
	}
	return res, nil
}

// NamedExec is NamedExecContext with context.Background.
func (t *Tx) NamedExec(query string, arg any) (sql.Result, error) {
	return t.NamedExecContext(context.Background(), query, arg)
}

// NamedQuery runs a query with named parameters (see sqlx.NamedQuery).
func (t *Tx) NamedQuery(query string, arg any) (*sqlx.Rows, error) {
	opaque, err := t.before(context.Background(), query)
	if err != nil {
		return nil, err
	}
	if opaque {
		defer t.ranOpaqueQuery()
	}
	rows, err := t.Tx.NamedQuery(query, arg)
	return rows, t.observe(err)
}

// PrepareContext prepares query for use in the transaction. A statement that
// would end the transaction is refused here; an opaque one is checked before
// COMMIT.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if _, err := t.before(ctx, query); err != nil {
		return nil, err
	}
	st, err := t.Tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, t.observe(err)
	}
	t.keep(st)
	return st, nil
}

// Prepare is PrepareContext with context.Background.
func (t *Tx) Prepare(query string) (*sql.Stmt, error) {
	return t.PrepareContext(context.Background(), query)
}

// PreparexContext is PrepareContext returning *sqlx.Stmt.
func (t *Tx) PreparexContext(ctx context.Context, query string) (*sqlx.Stmt, error) {
	if _, err := t.before(ctx, query); err != nil {
		return nil, err
	}
	st, err := t.Tx.PreparexContext(ctx, query)
	if err != nil {
		return nil, t.observe(err)
	}
	t.keep(st)
	return st, nil
}

// Preparex is PreparexContext with context.Background.
func (t *Tx) Preparex(query string) (*sqlx.Stmt, error) {
	return t.PreparexContext(context.Background(), query)
}

// PrepareNamedContext prepares a query with named parameters.
func (t *Tx) PrepareNamedContext(ctx context.Context, query string) (*sqlx.NamedStmt, error) {
	if _, err := t.before(ctx, query); err != nil {
		return nil, err
	}
	st, err := t.Tx.PrepareNamedContext(ctx, query)
	if err != nil {
		return nil, t.observe(err)
	}
	t.keep(st)
	return st, nil
}

// PrepareNamed is PrepareNamedContext with context.Background.
func (t *Tx) PrepareNamed(query string) (*sqlx.NamedStmt, error) {
	return t.PrepareNamedContext(context.Background(), query)
}

// StmtContext returns stmt bound to the transaction. Tx sees neither its
// text nor its executions (see [Tx] for what it checks instead): keep it to
// statements that stay inside the transaction. Bound after fn has
// returned, it fails when used.
func (t *Tx) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	return bindStmt(t, ctx, func(ctx context.Context) *sql.Stmt { return t.Tx.StmtContext(ctx, stmt) })
}

// bindStmt binds a statement to the transaction with bind and keeps it for
// finish to close; after fn has returned it binds it on a cancelled ctx, so
// that it fails when used instead of running in the next caller's relayed
// transaction.
func bindStmt[S io.Closer](t *Tx, ctx context.Context, bind func(context.Context) S) S {
	t.init()
	if t.ended.Load() || t.sendClaim(ctx) != nil {
		return bind(refusedCtx(ctx))
	}
	st := bind(ctx)
	t.keep(st)
	return st
}

// Stmt is StmtContext with context.Background.
func (t *Tx) Stmt(stmt *sql.Stmt) *sql.Stmt {
	return t.StmtContext(context.Background(), stmt)
}

// StmtxContext is StmtContext for a *sql.Stmt or *sqlx.Stmt, returning
// *sqlx.Stmt.
func (t *Tx) StmtxContext(ctx context.Context, stmt any) *sqlx.Stmt {
	return bindStmt(t, ctx, func(ctx context.Context) *sqlx.Stmt { return t.Tx.StmtxContext(ctx, stmt) })
}

// Stmtx is StmtxContext with context.Background.
func (t *Tx) Stmtx(stmt any) *sqlx.Stmt {
	return t.StmtxContext(context.Background(), stmt)
}

// NamedStmtContext is StmtContext for a *sqlx.NamedStmt.
func (t *Tx) NamedStmtContext(ctx context.Context, stmt *sqlx.NamedStmt) *sqlx.NamedStmt {
	return bindStmt(t, ctx, func(ctx context.Context) *sqlx.NamedStmt { return t.Tx.NamedStmtContext(ctx, stmt) })
}

// NamedStmt is NamedStmtContext with context.Background.
func (t *Tx) NamedStmt(stmt *sqlx.NamedStmt) *sqlx.NamedStmt {
	return t.NamedStmtContext(context.Background(), stmt)
}

// Unsafe returns the transaction as a *sqlx.Tx that ignores columns
// missing from destinations. Tx sees none of its statements (see [Tx] for
// what it checks instead): keep them to statements that stay inside the
// transaction, and never use it after fn has returned, when the underlying
// transaction may already be the next caller's.
func (t *Tx) Unsafe() *sqlx.Tx {
	t.init()
	_ = t.sendClaim(context.Background()) // its failure is the transaction's: the statements are refused
	return t.Tx.Unsafe()
}

// DriverName is the driver name of the transaction's pool.
func (t *Tx) DriverName() string { return t.base().DriverName() }

// Rebind turns the '?' of query into the bind variables of the pool's
// driver.
func (t *Tx) Rebind(query string) string { return t.base().Rebind(query) }

// BindNamed binds the named parameters of query with arg.
func (t *Tx) BindNamed(query string, arg any) (string, []any, error) {
	return t.base().BindNamed(query, arg)
}

// base is the attempt's transaction, for what reads no statement: the
// embedded *sqlx.Tx changes while a claim rides (see ride.go), this does
// not, so that these methods never race with it.
func (t *Tx) base() *sqlx.Tx {
	if t.txState != nil && t.claim.deferred {
		return t.claim.live
	}
	return t.Tx
}

// Compile-time checks: Tx serves sqlx's helpers (sqlx.GetContext,
// sqlx.SelectContext, sqlx.NamedExecContext) through its watched methods.
var (
	_ sqlx.ExtContext = (*Tx)(nil)
	_ sqlx.Ext        = (*Tx)(nil)
)
