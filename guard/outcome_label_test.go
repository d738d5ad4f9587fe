package guard_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

var errNoStock = errors.New("out of stock")

type soldOutError struct{ available int }

func (e *soldOutError) Error() string { return fmt.Sprintf("sold out: %d left", e.available) }

func TestOutcomeLabel(t *testing.T) {
	typed := &soldOutError{available: 2}
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}
	dup := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	wrapped := fmt.Errorf("order: %w", typed)
	cases := []struct {
		name    string
		outcome guard.Outcome
		err     error // what Do returned
		fnErr   error // what fn returned on its last attempt
		want    string
	}{
		{"committed", guard.OutcomeCommitted, nil, nil, "committed"},
		{"fn's sentinel", guard.OutcomeFailed, errNoStock, errNoStock, guard.OutcomeFnError},
		{"fn's typed error, wrapped by fn", guard.OutcomeFailed, wrapped, wrapped, guard.OutcomeFnError},
		{"fn's typed error", guard.OutcomeFailed, typed, typed, guard.OutcomeFnError},
		{"fn's error wrapped by Do", guard.OutcomeFailed, fmt.Errorf("guard: attempts: %w", errNoStock), errNoStock, guard.OutcomeFnError},
		{"a statement fn ran was refused", guard.OutcomeFailed, dup, dup, guard.OutcomeFnError},
		{"fn never ran: the claim failed", guard.OutcomeFailed, errors.New("guard: \"k\": claim: dial tcp: refused"), nil, "failed"},
		{"another error than fn's", guard.OutcomeFailed, errors.New("guard: verify: bad connection"), errNoStock, "failed"},
		{"a deadlock fn passed on, retries spent", guard.OutcomeFailed, fmt.Errorf("guard: %w", deadlock), deadlock, "failed"},
		{"a lost connection", guard.OutcomeFailed, driver.ErrBadConn, driver.ErrBadConn, "failed"},
		{"fn's ctx ended", guard.OutcomeFailed, context.DeadlineExceeded, context.DeadlineExceeded, "failed"},
		{"a nested Do was fenced", guard.OutcomeFailed, fmt.Errorf("inner: %w", guard.ErrFenced), fmt.Errorf("inner: %w", guard.ErrFenced), "failed"},
		{"a nested Do got no lock", guard.OutcomeFailed, redislock.ErrNotAcquired, redislock.ErrNotAcquired, "failed"},
		{"fn committed by itself", guard.OutcomeFailed, guard.ErrTxManaged, guard.ErrTxManaged, "failed"},
		{"a stale token of fn's own claim", guard.OutcomeFailed, fence.ErrStale, fence.ErrStale, "failed"},
		{"fenced, with fn's error", guard.OutcomeFenced, errNoStock, errNoStock, "fenced"},
		{"lock lost while fn failed", guard.OutcomeLost, fmt.Errorf("%w (fn: %w)", guard.ErrLockLost, errNoStock), errNoStock, "lost"},
		{"not acquired", guard.OutcomeNotAcquired, redislock.ErrNotAcquired, nil, "not_acquired"},
		{"not committed", guard.OutcomeNotCommitted, guard.ErrNotCommitted, nil, "not_committed"},
		{"unknown", guard.OutcomeUnknown, guard.ErrOutcomeUnknown, nil, "outcome_unknown"},
	}
	for _, c := range cases {
		got := guard.OutcomeLabel(guard.Result{Outcome: c.outcome, Err: c.err}, c.fnErr)
		if got != c.want {
			t.Errorf("%s: OutcomeLabel = %q, want %q", c.name, got, c.want)
		}
		if !slices.Contains(guard.OutcomeLabels(), got) {
			t.Errorf("%s: %q is not in OutcomeLabels %v", c.name, got, guard.OutcomeLabels())
		}
	}
}

// Through the hooks of a real Guard: fn's own answer is fn_error, a commit
// is committed, and fn's ctx running out is failed.
func TestOutcomeLabelFromHooks(t *testing.T) {
	type fnErrKey struct{}
	var labels []string
	hooks := guard.Hooks{
		OnDo: func(ctx context.Context, _ string) context.Context {
			return context.WithValue(ctx, fnErrKey{}, new(error))
		},
		OnStep: func(ctx context.Context, s guard.Step) {
			if s.Kind == guard.StepFn {
				*ctx.Value(fnErrKey{}).(*error) = s.Err
			}
		},
		OnDone: func(ctx context.Context, r guard.Result) {
			labels = append(labels, guard.OutcomeLabel(r, *ctx.Value(fnErrKey{}).(*error)))
		},
	}
	for _, batch := range []int{0, 4} {
		labels = nil
		e := newEnv(t, envConfig{guard: &guard.Options{Hooks: hooks, MaxBatch: batch}})
		ctx := context.Background()
		must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
		if err := e.g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return errNoStock }); !errors.Is(err, errNoStock) {
			t.Fatalf("Do = %v, want fn's error", err)
		}
		err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return increment(c, tx, 1)
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want context.Canceled", err)
		}
		if want := []string{"committed", guard.OutcomeFnError, "failed"}; !slices.Equal(labels, want) {
			t.Errorf("MaxBatch %d: labels %v, want %v", batch, labels, want)
		}
	}
}
