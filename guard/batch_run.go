package guard

// batch_run.go owns the run of one batch: a turn of the key's lock for all
// of its members, and the work (see attempt.go) that gives each member its
// turn in an attempt's transaction and settles the members' results. The
// attempt itself (claim, hand-on, check, commit) is Guard.attempt's, as for
// one caller's Do.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redfence/redfence/internal/errs"
	"github.com/redfence/redfence/redislock"
)

// batchRun is the runner of one batch: it takes the key's lock, runs the
// members' turns in one transaction per attempt, commits, unlocks and
// delivers every member's result.
type batchRun struct {
	g        *Guard
	b        *batch
	ctx      context.Context // the batch's ctx
	lctx     context.Context // ctx, also ended when the lock is lost
	token    uint64
	owner    string
	acquired time.Time
	released chan struct{} // see Guard.commit
	a        *attemptTx    // the attempt under way (run)

	// careful is set once a member's error has made the batch run again
	// without it: from then on each member runs inside a savepoint.
	careful bool
	// runAgain is set by an attempt that rolled back because a member failed,
	// to run the others again at once (see turns).
	runAgain bool
	// ho, when the lock is handed on at the claim, passes the current turn
	// of the lock on once the claim holds the fence row.
	ho *handOff
	// cur are the members the current attempt runs (begin), and ran those
	// of them whose work is in its transaction (run).
	cur, ran []*member
}

// runBatch is the goroutine of a batch at the head of its key's queue (or,
// when the lock is handed on at the claim, right behind a head that handed
// the lock on). Its owners are the batch's members: the last one to leave waits for
// it.
func (g *Guard) runBatch(b *batch) {
	defer close(b.finished)
	defer g.batches.finish(g, b)
	defer b.cancel(nil)
	if g.relaying() {
		// Entered by batches.join; b.ctx ends once every member has left.
		defer g.leaveRelay(b.ctx, b.key)
	}
	r := &batchRun{g: g, b: b, ctx: b.ctx}
	// The runner holds the batch until the committed transaction's
	// connection is back (see commit), or every member has left.
	if _, uerr := g.turns(r.ctx, b.key, r); !b.delivered {
		awaitRelease(r.ctx, r.released)
		r.deliver(nil, uerr)
	}
}

// lockOptions, granted, notGranted, ended and unlocked make a batchRun the
// work of Guard.turns.
func (r *batchRun) lockOptions(int) []redislock.LockOption { return nil }

func (r *batchRun) granted(lk *redislock.Lock, start time.Time, _ int) {
	g, key := r.g, r.b.key
	r.acquired = time.Now()
	r.token, r.owner = lk.Token(), lk.Owner()
	r.grant(r.token, nil)
	g.opt.Logger.Debug("guard: lock acquired", "key", key, "token", r.token, "wait", r.acquired.Sub(start), "batch", len(r.b.members))
	if h := g.opt.Hooks.OnAcquired; h != nil {
		h(key, r.token, r.acquired.Sub(start))
	}
}

func (r *batchRun) hold(lctx context.Context, ho *handOff, n int) {
	r.lctx, r.ho = lctx, ho
	if ho != nil && n > 0 {
		// A new turn: batches formed behind this one wait for it to hand
		// the lock on again.
		r.g.batches.setHandedOff(r.g, r.b, false)
	}
}

func (r *batchRun) notGranted(_ time.Time, useDB bool, err error) error {
	g, key := r.g, r.b.key
	if useDB {
		g.opt.Logger.Debug("guard: Redis unavailable for this batch", "key", key, "err", err)
		g.batches.mu.Lock()
		r.b.closed = true
		g.batches.mu.Unlock()
		r.deliver(errUseDatabase, nil)
		return nil
	}
	err = fmt.Errorf("guard: lock %q: %w", key, err)
	r.grant(0, err)
	r.deliver(err, nil)
	return nil
}

func (r *batchRun) ended(again int, err error) error {
	if err != nil && again == 0 {
		r.settleOpen(err)
	}
	return nil
}

func (r *batchRun) unlocked(_ uint64, start time.Time, err error) {
	r.step(r.b.members, StepUnlock, 0, start, err)
}

// grant closes the batch to new members and records each member's lock
// wait.
func (r *batchRun) grant(token uint64, err error) {
	bs := &r.g.batches
	end := time.Now()
	bs.mu.Lock()
	defer bs.mu.Unlock()
	r.b.closed = true
	for _, m := range r.b.members {
		if m.traced && !m.left {
			m.steps = append(m.steps, Step{Kind: StepLock, Token: token, Start: m.joined, Duration: end.Sub(m.joined), Err: err})
		}
	}
}

// step records a stage of the batch for each of ms still waiting.
func (r *batchRun) step(ms []*member, kind StepKind, attempt int, start time.Time, err error) {
	end := time.Now()
	bs := &r.g.batches
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, m := range ms {
		if m.traced && !m.left {
			m.steps = append(m.steps, Step{Kind: kind, Token: r.token, Attempt: attempt, Start: start, Duration: end.Sub(start), Err: err})
		}
	}
}

// open returns the members still waiting for a result, in order, and marks
// that none of them has work in a transaction.
func (r *batchRun) open() []*member {
	bs := &r.g.batches
	bs.mu.Lock()
	defer bs.mu.Unlock()
	var ms []*member
	for _, m := range r.b.members {
		if !m.final && !m.left {
			m.ran = false
			ms = append(ms, m)
		}
	}
	return ms
}

// unran records that the work of ms was rolled back: a member that leaves
// before its next turn touched nothing.
func (r *batchRun) unran(ms []*member) {
	bs := &r.g.batches
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, m := range ms {
		m.ran = false
	}
}

// settle makes err m's result.
func (r *batchRun) settle(m *member, err error) {
	bs := &r.g.batches
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if !m.final {
		m.final, m.err = true, err
	}
}

// settleOpen makes err the result of every member still waiting for one.
func (r *batchRun) settleOpen(err error) {
	bs := &r.g.batches
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, m := range r.b.members {
		if !m.final {
			m.final, m.err = true, err
		}
	}
}

// deliver hands every member its result: err for those that have none
// (the lock was not acquired), and uerr, a failed unlock, joined to every
// error. A committed member's result stays nil: reporting the unlock would
// invite a retry that applies its work twice; the lock expires with its
// lease.
func (r *batchRun) deliver(err, uerr error) {
	bs := &r.g.batches
	if err == nil {
		err = fmt.Errorf("%w: %q: the batch ended before this call ran", ErrNotCommitted, r.b.key)
	}
	committed := false
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, m := range r.b.members {
		if !m.final {
			m.final, m.err = true, err
		}
		if errors.Is(m.err, errUseDatabase) {
			m.useDB = true
		}
		switch {
		case m.err == nil:
			committed = true
		case uerr != nil && !m.useDB:
			m.err = errs.Join(m.err, uerr)
		}
		close(m.done)
	}
	r.b.delivered = true
	if uerr != nil && committed {
		r.g.opt.Logger.Warn("guard: unlock failed; the lock expires with its lease", "key", r.b.key, "token", r.token, "err", uerr)
	}
}

// now, steps and rerun, with begin, run, rolledBack and commit below, make
// a batchRun the work of Guard.attempts.
func (r *batchRun) now() time.Time { return time.Now() }
func (r *batchRun) steps() stepper { return batchSteps{r: r, ms: r.open()} }

func (r *batchRun) rerun() (again, none bool) {
	if !r.runAgain {
		return false, false
	}
	r.runAgain = false
	return true, len(r.open()) == 0
}

// batchSteps records the steps of an attempt for the members of a batch
// still waiting.
type batchSteps struct {
	r  *batchRun
	ms []*member
}

func (b batchSteps) now() time.Time { return time.Now() }
func (b batchSteps) step(kind StepKind, _ uint64, attempt int, start time.Time, err error) {
	b.r.step(b.ms, kind, attempt, start, err)
}

// begin starts an attempt for the members still waiting, when any is.
func (r *batchRun) begin(*holding) (plan, bool) {
	r.cur, r.ran = r.open(), nil
	return plan{st: batchSteps{r: r, ms: r.cur}}, len(r.cur) > 0
}

// run gives each member of the attempt its turn in a's transaction. The
// attempt ends there (done) unless some member's work is in the
// transaction, ready to commit; results of single members are settled on
// the way, and err, when not nil, is the result of all of them (or, with
// retry, the failure to retry).
func (r *batchRun) run(a *attemptTx, n int, fctx context.Context) (done, retry bool, err error) {
	g, lctx, open := r.g, r.lctx, r.cur
	r.a = a
	if r.ho.handed() { // handed on at this attempt's claim (Guard.attempt)
		g.batches.setHandedOff(g, r.b, true) // the next batch starts its turn
	}
	ran, failed, causer := r.turns(open, a.tx, n, fctx)
	switch {
	case r.runAgain:
		a.rollback()
		r.unran(open)
		r.careful = true
		return true, false, nil
	case failed != nil:
		retry, err = r.failed(a, open, ran, causer, failed)
		return true, retry, err
	}
	if lctx.Err() != nil {
		// Members the lost lock kept from running get the loss; the work of
		// those that ran is committed, as Do commits one caller's work when
		// the lock is lost after fn returned.
		lost := g.lostOr(lctx, context.Cause(lctx))
		for _, m := range open {
			if !contains(ran, m) {
				r.settle(m, lost)
			}
		}
	}
	r.ran = ran
	return len(ran) == 0, false, nil
}

// rolledBack records that every member with work in the attempt's
// transaction runs again.
func (r *batchRun) rolledBack() { r.unran(r.cur) }

// commit commits the work of the members that ran, and settles them.
func (r *batchRun) commit(a *attemptTx) (bool, error) {
	retry, err := a.commit(r.acquired, &r.released, batchSteps{r: r, ms: r.ran})
	if err != nil && retry {
		r.unran(r.cur)
		return true, err
	}
	for _, m := range r.ran {
		r.settle(m, err)
	}
	return false, nil
}

// failed ends an attempt whose transaction failed in a member's turn
// (failed): rolled back by the server and retryable, every member with
// work in it runs again; otherwise the members are settled (see failBatch).
func (r *batchRun) failed(a *attemptTx, open, ran []*member, causer *member, failed *txFailure) (retry bool, err error) {
	g, lctx := r.g, r.lctx
	if !failed.retry {
		a.rollback()
		r.failBatch(open, ran, causer, failed.err)
		return false, nil
	}
	retry, perr := a.retryable(failed.err)
	a.rollback()
	if perr != nil {
		// The claiming transaction committed (or may have) before the
		// failure: never run again.
		for _, m := range open {
			if contains(ran, m) {
				r.settle(m, perr)
			} else {
				r.settle(m, fmt.Errorf("%w: %q: another call of the batch failed the transaction: %v", ErrNotCommitted, r.b.key, perr))
			}
		}
		return false, nil
	}
	// The server rolled the transaction back: every member with work in it
	// runs again.
	r.unran(open)
	return retry && lctx.Err() == nil, g.lostOr(lctx, failed.err)
}

// turns hands tx to each member of open in order and returns those whose
// work is in tx. It stops early when the lock is lost or tx fails; failed
// is then tx's failure, and causer the member whose turn it was.
//
// Members run inside savepoints only when the batch is careful (or
// Options.BatchSavepoints asks for them). Otherwise a member's error (or
// panic) settles that member, and turns stops with r.runAgain set: the
// transaction is rolled back and the others run again, carefully. A batch
// whose fns succeed so saves a round trip per member, and one whose fns
// fail pays for one member's work twice at most.
//
// lctx is the members' ctx: it ends when the lock is lost or, after a
// hand-off at the claim, when tx fails.
func (r *batchRun) turns(open []*member, tx *Tx, n int, lctx context.Context) (ran []*member, failed *txFailure, causer *member) {
	// One member needs no savepoint: its error rolls the transaction back.
	var md turnMode
	md.savepoints = len(open) > 1 && (r.careful || r.g.opt.BatchSavepoints)
	md.optimistic = len(open) > 1 && !md.savepoints
	for _, m := range open {
		if lctx.Err() != nil {
			return ran, tx.failure(), nil
		}
		if md.savepoints {
			if failed := r.savepoint(tx, &md); failed != nil {
				return ran, failed, nil
			}
		}
		rep, handed := r.handOver(m, tx, lctx)
		var stop bool
		switch {
		case !handed:
			continue
		case rep.skipped:
			r.settle(m, notAcquired(r.b.key, context.Cause(m.ctx)))
			continue
		case rep.aborted != nil:
			stop, failed = r.panicked(m, tx, rep, md)
		default:
			tx.settleAfterFn(r.ctx, rep.err)
			r.step([]*member{m}, StepFn, n, rep.start, fnStepErr(tx, rep.err))
			if f := tx.failure(); f != nil {
				if f.retry && rep.err != nil && !errors.Is(rep.err, f.err) {
					// fn's own error is returned as it is, never retried;
					// the others run again.
					r.settle(m, r.g.lostOr(lctx, rep.err))
				}
				return ran, f, m
			}
			if rep.err != nil {
				stop, failed = r.erred(m, tx, rep.err, lctx, md)
				break
			}
			ran = append(ran, m)
			// A statement that ended the transaction must not let the next
			// member's work run outside it.
			if err := tx.verify(r.ctx); err != nil {
				return ran, r.broken(tx, err), m
			}
		}
		switch {
		case stop && r.runAgain:
			return nil, nil, nil
		case stop:
			return ran, failed, nil
		}
	}
	return ran, nil, nil
}

// turnMode is how turns runs the members' fns: each inside a savepoint of
// its own (sp, numbered spn, for the current member), or, optimistic,
// without, rolling everything back when one fails.
type turnMode struct {
	savepoints, optimistic bool
	sp                     string
	spn                    int64
}

// savepoint sets the savepoint of the next member's turn in md.
func (r *batchRun) savepoint(tx *Tx, md *turnMode) *txFailure {
	md.spn = tx.savepoints.Add(1)
	md.sp = "redfence_sp" + strconv.FormatInt(md.spn, 10)
	if _, err := tx.ExecContext(r.ctx, "SAVEPOINT "+md.sp); err != nil {
		return r.broken(tx, fmt.Errorf("guard: %q: savepoint: %w", r.b.key, err))
	}
	return nil
}

// panicked undoes the work of m, which is leaving with a panic (rep), and
// settles it. stop says that turns must stop: with failed, or, when
// r.runAgain is set, to run the others again.
func (r *batchRun) panicked(m *member, tx *Tx, rep report, md turnMode) (stop bool, failed *txFailure) {
	panicErr := fmt.Errorf("guard: %q: fn panicked", r.b.key)
	switch {
	case md.savepoints:
		r.rollbackTo(tx, md.sp, md.spn)
	case md.optimistic && tx.failure() == nil:
		r.a.rollback() // the attempt's: run's rollback for runAgain then sends nothing
		close(rep.aborted)
		r.settle(m, panicErr)
		r.runAgain = true
		return true, nil
	}
	close(rep.aborted)
	r.settle(m, panicErr)
	if f := tx.failure(); f != nil || !md.savepoints {
		if f == nil {
			f = &txFailure{err: panicErr}
		}
		return true, f
	}
	return false, nil
}

// erred settles m, whose fn returned ferr, and undoes its work: by rolling
// back to its savepoint, or, without one, by stopping the turns (as
// panicked does).
func (r *batchRun) erred(m *member, tx *Tx, ferr error, lctx context.Context, md turnMode) (stop bool, failed *txFailure) {
	if cause := context.Cause(lctx); errors.Is(cause, ErrLockLost) {
		ferr = fmt.Errorf("%w (fn: %w)", cause, ferr)
	}
	switch {
	case md.optimistic:
		r.settle(m, ferr)
		r.runAgain = true
		return true, nil
	case !md.savepoints:
		r.settle(m, ferr)
		return true, nil
	}
	r.rollbackTo(tx, md.sp, md.spn)
	r.settle(m, ferr)
	if f := tx.failure(); f != nil {
		return true, f
	}
	return false, nil
}

// handOver gives m its turn and waits for its report. handed is false when
// m has left.
func (r *batchRun) handOver(m *member, tx *Tx, lctx context.Context) (rep report, handed bool) {
	bs := &r.g.batches
	bs.mu.Lock()
	if m.left || m.final {
		bs.mu.Unlock()
		return report{}, false
	}
	m.turnSent = true
	bs.mu.Unlock()
	m.turn <- turn{tx: tx, lctx: lctx}
	return <-m.report, true
}

// rollbackTo undoes a member's work. Bound to the batch's ctx, not to lctx:
// a lock lost meanwhile must not keep the other members' work from
// committing. A failure marks tx unusable, so that the work never commits.
func (r *batchRun) rollbackTo(tx *Tx, sp string, n int64) {
	if _, err := tx.ExecContext(r.ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
		r.broken(tx, fmt.Errorf("guard: %q: rollback to savepoint: %w", r.b.key, err))
		return
	}
	tx.rolledBackTo(n)
}

// broken returns tx's failure, recording err as one that is not retried
// when none is recorded.
func (r *batchRun) broken(tx *Tx, err error) *txFailure {
	if tx.failure() == nil {
		tx.fail(err, false)
	}
	return tx.failure()
}

// failBatch settles the members of a transaction that failed for good
// (ErrImplicitCommit, a savepoint that could not be rolled back to). The
// member whose turn it was gets the failure; those whose work was in the
// transaction learn that it did not commit, or, when a statement ended the
// transaction (possibly committing what preceded it), that the outcome is
// unknown; those that had not run learn that nothing ran.
func (r *batchRun) failBatch(open, ran []*member, causer *member, ferr error) {
	key := r.b.key
	ended := errors.Is(ferr, ErrImplicitCommit) && strings.Contains(ferr.Error(), implicitCommitNote) ||
		errors.Is(ferr, errMayHaveEnded)
	for _, m := range open {
		var err error
		switch {
		case m == causer:
			err = ferr
			r.g.batches.mu.Lock()
			if fe := m.fnErr; fe != nil {
				err = withStatementErr(ferr, fe)
			}
			r.g.batches.mu.Unlock()
		case contains(ran, m) && ended:
			err = fmt.Errorf("%w: %q: another call of the batch ended the transaction: %v", ErrOutcomeUnknown, key, ferr)
		default:
			err = fmt.Errorf("%w: %q: another call of the batch failed the transaction: %v", ErrNotCommitted, key, ferr)
		}
		r.settle(m, err)
	}
}

// fnStepErr is the error StepFn reports: fn's, or the failure of tx it
// ignored.
func fnStepErr(tx *Tx, err error) error {
	if f := tx.failure(); f != nil && err == nil {
		return f.err
	}
	return err
}

func contains(ms []*member, m *member) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}
