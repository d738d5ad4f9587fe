package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

type traceKey struct{}

// recorder collects what the tracing hooks report.
type recorder struct {
	mu      sync.Mutex
	steps   []string
	results []guard.Result
	ctxOK   bool
}

func (r *recorder) hooks() guard.Hooks {
	return guard.Hooks{
		OnDo: func(ctx context.Context, key string) context.Context {
			return context.WithValue(ctx, traceKey{}, "span:"+key)
		},
		OnStep: func(ctx context.Context, s guard.Step) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if ctx.Value(traceKey{}) != "span:"+s.Key {
				r.ctxOK = false
			}
			e := fmt.Sprintf("%s/%d", s.Kind, s.Attempt)
			if s.Err != nil {
				e += "!"
			}
			if s.Duration < 0 || s.Start.IsZero() {
				e += "?"
			}
			r.steps = append(r.steps, e)
		},
		OnDone: func(ctx context.Context, res guard.Result) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if ctx.Value(traceKey{}) != "span:"+res.Key {
				r.ctxOK = false
			}
			r.results = append(r.results, res)
		},
	}
}

func (r *recorder) take() (string, guard.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.steps, " ")
	var res guard.Result
	if len(r.results) == 1 {
		res = r.results[0]
	}
	r.steps, r.results = nil, nil
	return s, res
}

func TestHooksReportStepsAndOutcomes(t *testing.T) {
	rec := &recorder{ctxOK: true}
	// A retry keeps its turn of the lock (with the lock handed on at the
	// claim it takes a new one: see TestHandOffRetryTakesNewTurn).
	e := newEnv(t, envConfig{guard: atEnd(guard.Options{BackoffMin: time.Millisecond, Hooks: rec.hooks()})})
	ctx := context.Background()

	var token uint64
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if ctx.Value(traceKey{}) != "span:k" {
			t.Error("fn's ctx does not carry the ctx OnDo returned")
		}
		token = tx.Token()
		return increment(ctx, tx, 1)
	}))
	steps, res := rec.take()
	if steps != "lock/0 claim/1 fn/1 commit/1 unlock/0" {
		t.Errorf("committed Do: steps %q", steps)
	}
	if res.Outcome != guard.OutcomeCommitted || res.Token != token || res.Attempts != 1 || res.Err != nil ||
		res.Held <= 0 || res.Duration < res.Held || res.Key != "k" {
		t.Errorf("committed Do: result %+v", res)
	}

	// fn's error: rolled back, failed.
	err := e.g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return errBoom })
	steps, res = rec.take()
	if !errors.Is(err, errBoom) || steps != "lock/0 claim/1 fn/1! unlock/0" || res.Outcome != guard.OutcomeFailed || !errors.Is(res.Err, errBoom) {
		t.Errorf("failed Do: %v, steps %q, result %+v", err, steps, res)
	}

	// A retried attempt shows up as a second claim and fn.
	err = e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if tx.Attempt() == 1 {
			return killOwnConnection(ctx, t, e, tx)
		}
		return nil
	})
	steps, res = rec.take()
	if err != nil || steps != "lock/0 claim/1 fn/1! claim/2 fn/2 commit/2 unlock/0" || res.Attempts != 2 || res.Outcome != guard.OutcomeCommitted {
		t.Errorf("retried Do: %v, steps %q, result %+v", err, steps, res)
	}

	// A stale token: the claim fails, fn never runs.
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	testenv.MustExec(t, e.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", future, e.g.FenceResource("k"))
	must(t, e.rdb.Del(ctx, e.names("k").Token).Err())
	err = e.g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return nil })
	steps, res = rec.take()
	if !errors.Is(err, guard.ErrFenced) || steps != "lock/0 claim/1! unlock/0" || res.Outcome != guard.OutcomeFenced {
		t.Errorf("fenced Do: %v, steps %q, result %+v", err, steps, res)
	}

	// The lock is not acquired when ctx ends in the queue.
	lk, err := e.locker.Lock(ctx, "busy")
	must(t, err)
	defer func() { _ = lk.Unlock(ctx) }()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = e.g.Do(short, "busy", func(context.Context, *guard.Tx) error { return nil })
	steps, res = rec.take()
	if err == nil || steps != "lock/0!" || res.Outcome != guard.OutcomeNotAcquired || res.Token != 0 || res.Held != 0 {
		t.Errorf("not acquired: %v, steps %q, result %+v", err, steps, res)
	}
	if !rec.ctxOK {
		t.Error("a hook got a ctx other than the one OnDo returned")
	}
}
