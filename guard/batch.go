package guard

// batch.go owns the joining of callers into batches (Options.Batch): a
// caller of a key joins the batch that waits for the key's lock, and waits
// for its turn, which batch_run.go gives it; nothing here runs SQL.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redfence/redfence/internal/errs"
	"github.com/redfence/redfence/redislock"
)

// batches holds, per key, the batches of this Guard's callers (Options.MaxBatch):
// the head waits for or holds the key's lock, the tail collects joiners, and
// the ones between are full and wait for their turn. Only the head has a
// goroutine (its runner) and a place in the Redis queue.
type batches struct {
	mu   sync.Mutex // guards every field of batches, batch and member below it
	keys map[string]*batchQueue
}

type batchQueue struct {
	list []*batch // head first
}

// batch is callers of one key whose work runs in one transaction under one
// lock turn.
type batch struct {
	key     string
	members []*member // in arrival order; fixed once the lock is granted
	present int       // members whose Do has not returned yet
	started bool      // the runner goroutine runs (the batch is the head)
	// handedOff: the batch's claim holds the fence row and the lock has
	// gone on (HandOffAtClaim), so the batch after it may run.
	handedOff bool
	closed    bool // the lock was granted: no more members
	// delivered: every member has its result; the runner only has its own
	// cleanup left.
	delivered bool

	// ctx governs the lock wait and the transaction. It is no caller's ctx
	// (it has the values of the first member's only): it is cancelled when
	// every member has left before the batch delivered,
	// so that the batch gives up its place in the queue or cuts its COMMIT
	// short, as one caller's Do does when its ctx ends.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	finished chan struct{} // closed as the runner returns
}

// errBatchAbandoned ends a batch that no caller waits for any more.
var errBatchAbandoned = errors.New("guard: every caller of the batch left")

// member is one Do waiting in a batch. Its fn runs on its own goroutine,
// when the runner hands it the transaction.
type member struct {
	ctx    context.Context
	fn     func(context.Context, *Tx) error
	joined time.Time
	traced bool // the Do has a tracer: record its steps

	turn   chan turn   // runner → member: run fn now (capacity 1)
	report chan report // member → runner: how fn ended (capacity 1)
	done   chan struct{}

	// Guarded by batches.mu.
	turnSent bool   // a turn is in turn, or about to be
	left     bool   // Do has returned or is returning
	ran      bool   // fn returned nil in the current attempt: its work is in the transaction
	fnErr    error  // fn's error in the last attempt it ran
	final    bool   // err is this member's result
	err      error  // the result, delivered when done is closed
	useDB    bool   // the batch found Redis unavailable: run in database mode alone
	steps    []Step // stages of Do, for the tracer
}

// turn hands the transaction to a member.
type turn struct {
	tx   *Tx
	lctx context.Context // ends when the lock is lost
}

// report is how a member's turn ended.
type report struct {
	err        error
	start, end time.Time
	skipped    bool // fn did not run: the member's ctx had ended
	// aborted, when not nil, says fn panicked or ended its goroutine; the
	// runner closes it once the member's work is undone.
	aborted chan struct{}
}

// batched is Do with Options.MaxBatch above 1: the caller joins the key's
// open batch and runs fn when the batch's runner hands it the transaction.
func (g *Guard) batched(ctx context.Context, key string, fn func(context.Context, *Tx) error, tr *tracer) (err error) {
	m := &member{ctx: ctx, fn: fn, joined: time.Now(), traced: tr != nil,
		turn: make(chan turn, 1), report: make(chan report, 1), done: make(chan struct{})}
	b := g.batches.join(g, key, m)
	normal := false // not panicking, and the steps are the batch's to report
	defer func() {
		// Runs on panics too: a member that leaves must not keep its batch
		// waiting, and the last one to leave waits for the runner.
		if g.batches.leave(g, b, m) && normal && errors.Is(err, ErrOutcomeUnknown) {
			// The runner has ended, so the outcome is known after all.
			g.batches.mu.Lock()
			if m.final {
				err = m.err
			}
			g.batches.mu.Unlock()
		}
		if normal {
			g.batches.replay(m, tr)
		}
	}()
	err = g.await(b, m)
	if errors.Is(err, errUseDatabase) {
		// The batch found Redis unavailable: database mode, one caller at a
		// time, as Do without batching, which registers for relaying.
		if g.relaying() {
			g.relays.enter(key)
			defer g.leaveRelay(ctx, key)
		}
		return g.runDB(ctx, key, fn, tr)
	}
	normal = true
	return err
}

// join adds m to key's open batch, opening one (and starting its runner when
// it is the head) when there is none or the open one is full or granted.
func (bs *batches) join(g *Guard, key string, m *member) *batch {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.keys == nil {
		bs.keys = map[string]*batchQueue{}
	}
	q := bs.keys[key]
	if q == nil {
		q = &batchQueue{}
		bs.keys[key] = q
	}
	var b *batch
	if n := len(q.list); n > 0 {
		if t := q.list[n-1]; !t.closed && len(t.members) < g.opt.MaxBatch {
			b = t
		}
	}
	if b == nil {
		b = &batch{key: key, finished: make(chan struct{})}
		// The batch's own statements carry the values (not the deadline or
		// cancellation) of the ctx of the caller that opened it.
		b.ctx, b.cancel = context.WithCancelCause(context.WithoutCancel(m.ctx))
		if g.relaying() {
			// A batch counts as one caller of the key for relaying; its
			// runner (or leave, for a batch that never starts) leaves.
			g.relays.enter(key)
		}
		q.list = append(q.list, b)
		q.startReady(g)
	}
	b.members = append(b.members, m)
	b.present++
	return b
}

// leave records that m's Do is returning. When m was the last member of a
// started batch, leave cancels the batch unless it has delivered, waits for
// its runner to return, and reports true. A batch not started yet that
// loses its last member is dropped.
func (bs *batches) leave(g *Guard, b *batch, m *member) (last bool) {
	bs.mu.Lock()
	m.left = true
	b.present--
	if b.present > 0 {
		bs.mu.Unlock()
		return false
	}
	if !b.started {
		q := bs.keys[b.key]
		for i, x := range q.list {
			if x == b {
				q.list = append(q.list[:i], q.list[i+1:]...)
				break
			}
		}
		bs.mu.Unlock()
		b.cancel(nil)
		if g.relaying() {
			g.leaveRelay(b.ctx, b.key)
		}
		return false
	}
	if !b.delivered {
		b.cancel(errBatchAbandoned)
	}
	bs.mu.Unlock()
	<-b.finished
	return true
}

// finish removes b from its queue and starts the runner of the new head,
// unless it runs already (see startReady). The runner calls it last.
func (bs *batches) finish(g *Guard, b *batch) {
	bs.mu.Lock()
	q := bs.keys[b.key]
	for i, x := range q.list {
		if x == b {
			q.list = append(q.list[:i], q.list[i+1:]...)
			break
		}
	}
	if len(q.list) > 0 {
		q.startReady(g)
	} else {
		delete(bs.keys, b.key)
	}
	bs.mu.Unlock()
}

// startReady starts the runners of the batches that may take their turn:
// the head, and a batch right behind one that handed the lock on at its
// claim. batches.mu is held.
func (q *batchQueue) startReady(g *Guard) {
	for i, b := range q.list {
		if !b.started && (i == 0 || q.list[i-1].handedOff) {
			b.started = true
			go g.runBatch(b)
		}
	}
}

// setHandedOff records whether b's current turn has handed the lock on at
// its claim, and starts the batch behind it when it has.
func (bs *batches) setHandedOff(g *Guard, b *batch, handed bool) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b.handedOff = handed
	if handed {
		bs.keys[b.key].startReady(g)
	}
}

// await waits for m's turns and result, running fn on the caller's
// goroutine each time the runner hands it the transaction, until the
// result is delivered or the caller's ctx ends.
func (g *Guard) await(b *batch, m *member) error {
	for {
		select {
		case t := <-m.turn:
			g.batches.mu.Lock()
			m.turnSent = false
			g.batches.mu.Unlock()
			g.take(m, t)
		case <-m.done:
			return m.err
		case <-m.ctx.Done():
			return g.quit(b, m)
		}
	}
}

// quit leaves the batch because the caller's ctx ended before its result
// was delivered. A member that never ran, or whose work the runner has
// rolled back, touched nothing; one whose work is in the transaction cannot
// tell whether it will commit.
func (g *Guard) quit(b *batch, m *member) error {
	bs := &g.batches
	bs.mu.Lock()
	if m.final {
		err := m.err
		bs.mu.Unlock()
		return err
	}
	m.left = true
	pending, ran, fnErr := m.turnSent, m.ran, m.fnErr
	if m.traced && !b.closed {
		m.steps = append(m.steps, Step{Kind: StepLock, Start: m.joined, Duration: time.Since(m.joined), Err: context.Cause(m.ctx)})
	}
	bs.mu.Unlock()
	if pending {
		<-m.turn
		m.report <- report{skipped: true}
	}
	cause := context.Cause(m.ctx)
	switch {
	case ran:
		// The cause is text only: an outcome error must not look like one
		// a caller would retry.
		return fmt.Errorf("%w: %q: ctx ended before the batch's COMMIT: %v", ErrOutcomeUnknown, b.key, cause)
	case fnErr != nil:
		// The runner never commits the work of a failed fn, nor of an
		// attempt it is about to retry.
		return errs.Join(fnErr, cause)
	}
	return notAcquired(b.key, cause)
}

// notAcquired is the error of a member that left before its fn ran, as Do
// without batching reports a lock wait that ctx ended.
func notAcquired(key string, cause error) error {
	return fmt.Errorf("guard: lock %q: %w", key, errs.Join(redislock.ErrNotAcquired, cause))
}

// take runs m's fn with the transaction t hands over, on the caller's
// goroutine, and reports how it ended. fn's ctx ends when the caller's ctx
// ends or the lock is lost. A panic in fn, or an exit of its goroutine,
// continues once the runner has undone the member's work.
func (g *Guard) take(m *member, t turn) {
	if m.ctx.Err() != nil {
		m.report <- report{skipped: true}
		return
	}
	fctx, cancel := context.WithCancelCause(m.ctx)
	stop := context.AfterFunc(t.lctx, func() { cancel(context.Cause(t.lctx)) })
	if t.tx.onFail != nil {
		t.tx.memberFail.Store(&cancel)
		defer t.tx.memberFail.Store(nil)
	}
	// The member's own view of the transaction: what fn keeps of it past
	// its return is refused, not run in the next member's work.
	mt := t.tx.forMember()
	mt.batchCtx = t.lctx
	sctx := withScope(fctx, &scope{g: g, key: t.tx.key, tx: mt})
	returned := false
	defer func() {
		mt.finish()
		stop()
		cancel(nil)
		if !returned {
			undone := make(chan struct{})
			m.report <- report{aborted: undone}
			select {
			case <-undone:
			case <-m.ctx.Done():
			}
		}
	}()
	start := time.Now()
	err := m.fn(sctx, mt)
	mt.finish()
	returned = true
	g.batches.mu.Lock()
	m.ran, m.fnErr = err == nil, err
	g.batches.mu.Unlock()
	m.report <- report{err: err, start: start, end: time.Now()}
}

// replay reports the steps recorded for m to its tracer, on the caller's
// goroutine. A member that leaves before its batch unlocked reports an
// unlock of its own, so that every granted lock step has its unlock.
func (bs *batches) replay(m *member, tr *tracer) {
	if tr == nil {
		return
	}
	bs.mu.Lock()
	steps := append([]Step(nil), m.steps...)
	bs.mu.Unlock()
	unlocked := false
	for _, s := range steps {
		tr.replay(s)
		unlocked = unlocked || s.Kind == StepUnlock
	}
	if !unlocked && !tr.acquired.IsZero() {
		tr.replay(Step{Kind: StepUnlock, Token: tr.res.Token, Start: time.Now()})
	}
}

// replay reports s, a step that ended at s.Start+s.Duration, as step does
// for a step that ends now.
func (t *tracer) replay(s Step) {
	end := s.Start.Add(s.Duration)
	switch s.Kind {
	case StepLock:
		t.res.Wait = s.Duration
		if s.Err == nil {
			t.res.Token = s.Token
			t.acquired = end
		}
	case StepUnlock:
		if !t.acquired.IsZero() {
			t.res.Held = end.Sub(t.acquired)
		}
	case StepClaim:
		t.res.Attempts = s.Attempt
	}
	if t.hooks.OnStep != nil {
		s.Key = t.res.Key
		t.hooks.OnStep(t.ctx, s)
	}
}
