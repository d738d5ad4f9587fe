package guard

// outcome.go owns the outcome labels of a call's result, for metrics.

import (
	"context"
	"errors"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/redislock"
)

// This file tells, for metrics and traces, the errors fn returned of its
// own making (a sold-out answer, an unknown item) from failures of the lock,
// the database or guard itself, so that an alert on failures does not fire
// on normal business answers.

// OutcomeFnError is the label [OutcomeLabel] gives a Do that returned fn's
// own error: fn ran, decided against committing, and nothing else failed.
const OutcomeFnError = "fn_error"

// OutcomeLabels returns every label [OutcomeLabel] can return, committed
// first, for metrics that expose each from the start.
func OutcomeLabels() []string {
	return []string{OutcomeCommitted.String(), OutcomeFnError, OutcomeNotAcquired.String(), OutcomeFenced.String(),
		OutcomeLost.String(), OutcomeNotCommitted.String(), OutcomeUnknown.String(), OutcomeFailed.String()}
}

// OutcomeLabel returns the label of a finished Do: r.Outcome's String, or
// [OutcomeFnError] for an [OutcomeFailed] call whose error is fn's own (see
// [IsFnError]). "failed" then means that the lock, the database or guard
// failed in a way that has no outcome of its own. fnErr is the Err of the
// call's last [StepFn] step, as [Hooks].OnStep received it; nil when fn did
// not run.
func OutcomeLabel(r Result, fnErr error) string {
	if r.Outcome == OutcomeFailed && IsFnError(r.Err, fnErr) {
		return OutcomeFnError
	}
	return r.Outcome.String()
}

// IsFnError reports whether err, returned by Do, is an error of fn's own
// making: fnErr, what fn returned on its last attempt (the Err of the last
// [StepFn] step), passed on by Do, and neither one of guard's errors or of
// the lock's, nor a failure of the database ([fence.Retryable],
// [fence.IsConnectionLost]), nor the end of a ctx.
func IsFnError(err, fnErr error) bool {
	if err == nil || fnErr == nil || !errors.Is(err, fnErr) {
		return false
	}
	if fence.Retryable(fnErr) || fence.IsConnectionLost(fnErr) ||
		errors.Is(fnErr, context.Canceled) || errors.Is(fnErr, context.DeadlineExceeded) {
		return false
	}
	for _, e := range notFnErrors {
		if errors.Is(fnErr, e) {
			return false
		}
	}
	return true
}

// notFnErrors are the errors fn may pass on that are failures of guard, of
// a nested Do, of the lock or of the fence, not answers of fn's own.
var notFnErrors = []error{
	ErrFenced, ErrLockLost, ErrNotCommitted, ErrOutcomeUnknown, ErrImplicitCommit, ErrTxManaged,
	ErrNestedPool, ErrReentry, ErrUnsafePool, ErrFallbackLimit, ErrInvalidKey, ErrInvalidGuard,
	ErrNilFunc, ErrNilContext,
	redislock.ErrNotAcquired, redislock.ErrLost, redislock.ErrClosed,
	fence.ErrStale, fence.ErrConflict,
}
