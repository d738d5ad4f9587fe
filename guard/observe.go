package guard

// observe.go owns what a call reports to Options.Hooks: its steps and
// its result.

import (
	"context"
	"errors"
	"time"
)

// StepKind names a stage of [Guard.Do].
type StepKind int

const (
	// StepLock is the wait for the lock in the key's FIFO queue.
	StepLock StepKind = iota
	// StepClaim begins an attempt's transaction and claims the fence row
	// (for a key's first Do, which finds no row: also the rollback, making
	// the row and claiming again).
	StepClaim
	// StepFn is fn itself.
	StepFn
	// StepCommit is the COMMIT, and the settling check after a COMMIT whose
	// reply was lost.
	StepCommit
	// StepUnlock releases the lock.
	StepUnlock
)

func (k StepKind) String() string {
	switch k {
	case StepLock:
		return "lock"
	case StepClaim:
		return "claim"
	case StepFn:
		return "fn"
	case StepCommit:
		return "commit"
	case StepUnlock:
		return "unlock"
	}
	return "unknown"
}

// Step describes a stage of Do that has ended, for [Hooks].OnStep.
type Step struct {
	Kind     StepKind
	Key      string
	Token    uint64 // the lock's token; 0 in a StepLock that did not acquire
	Attempt  int    // the transaction attempt (from 1); 0 for StepLock and StepUnlock
	Start    time.Time
	Duration time.Duration
	Err      error // the step's error, nil when it succeeded
}

// Outcome classifies how a Do ended, for [Hooks].OnDone.
type Outcome int

const (
	// OutcomeCommitted: the transaction committed; Do returned nil.
	OutcomeCommitted Outcome = iota
	// OutcomeNotAcquired: the lock was not acquired (ctx ended, Redis
	// unreachable); nothing ran.
	OutcomeNotAcquired
	// OutcomeFenced: the database rejected the token ([ErrFenced]).
	OutcomeFenced
	// OutcomeLost: the lock was lost before the transaction could commit
	// ([ErrLockLost]).
	OutcomeLost
	// OutcomeNotCommitted: COMMIT failed and is known not to have applied
	// ([ErrNotCommitted]).
	OutcomeNotCommitted
	// OutcomeUnknown: whether COMMIT applied could not be told
	// ([ErrOutcomeUnknown]).
	OutcomeUnknown
	// OutcomeFailed: fn or the database failed otherwise; rolled back.
	OutcomeFailed
)

func (o Outcome) String() string {
	switch o {
	case OutcomeCommitted:
		return "committed"
	case OutcomeNotAcquired:
		return "not_acquired"
	case OutcomeFenced:
		return "fenced"
	case OutcomeLost:
		return "lost"
	case OutcomeNotCommitted:
		return "not_committed"
	case OutcomeUnknown:
		return "outcome_unknown"
	case OutcomeFailed:
		return "failed"
	}
	return "unknown"
}

// Result describes a finished Do, for [Hooks].OnDone.
type Result struct {
	Key      string
	Mode     Mode   // how the key was held: the Redis lock, or the database alone (Options.Fallback)
	Token    uint64 // 0 when the lock was not acquired
	Attempts int    // transaction attempts made
	Outcome  Outcome
	Err      error // what Do returned
	Start    time.Time
	Wait     time.Duration // in the lock's queue
	Held     time.Duration // from the grant to the end of the unlock; 0 when not acquired
	Duration time.Duration // the whole call
}

// tracer reports one Do's steps and result to the hooks that want them. Its
// methods are no-ops on a nil tracer, which Do uses when no such hook is set.
type tracer struct {
	ctx      context.Context
	hooks    *Hooks
	res      Result
	acquired time.Time
}

func (g *Guard) newTracer(ctx context.Context, key string) (*tracer, context.Context) {
	h := &g.opt.Hooks
	if h.OnDo == nil && h.OnStep == nil && h.OnDone == nil {
		return nil, ctx
	}
	if h.OnDo != nil {
		if c := h.OnDo(ctx, key); c != nil {
			ctx = c
		}
	}
	return &tracer{ctx: ctx, hooks: h, res: Result{Key: key, Start: time.Now()}}, ctx
}

// mode records how the key is held.
func (t *tracer) mode(m Mode) {
	if t != nil {
		t.res.Mode = m
	}
}

// now returns the time, or the zero time when nothing is traced.
func (t *tracer) now() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

func (t *tracer) step(kind StepKind, token uint64, attempt int, start time.Time, err error) {
	t.stepEnded(kind, token, attempt, start, time.Now(), err)
}

// stepEnded is step for a step that ended at end, recorded later.
func (t *tracer) stepEnded(kind StepKind, token uint64, attempt int, start, end time.Time, err error) {
	if t == nil {
		return
	}
	switch kind {
	case StepLock:
		t.res.Wait = end.Sub(start)
		if err == nil {
			t.res.Token = token
			t.acquired = end
		}
	case StepUnlock:
		if !t.acquired.IsZero() {
			t.res.Held = end.Sub(t.acquired)
		}
	case StepClaim:
		t.res.Attempts = attempt
	}
	if t.hooks.OnStep != nil {
		t.hooks.OnStep(t.ctx, Step{Kind: kind, Key: t.res.Key, Token: token, Attempt: attempt,
			Start: start, Duration: end.Sub(start), Err: err})
	}
}

func (t *tracer) done(err error) {
	if t == nil || t.hooks.OnDone == nil {
		return
	}
	t.res.Err = err
	t.res.Outcome = outcomeOf(err, t.acquired.IsZero())
	t.res.Duration = time.Since(t.res.Start)
	t.hooks.OnDone(t.ctx, t.res)
}

func outcomeOf(err error, notAcquired bool) Outcome {
	switch {
	case err == nil:
		return OutcomeCommitted
	case notAcquired:
		return OutcomeNotAcquired
	case errors.Is(err, ErrFenced):
		return OutcomeFenced
	case errors.Is(err, ErrLockLost):
		return OutcomeLost
	case errors.Is(err, ErrOutcomeUnknown):
		return OutcomeUnknown
	case errors.Is(err, ErrNotCommitted):
		return OutcomeNotCommitted
	}
	return OutcomeFailed
}
