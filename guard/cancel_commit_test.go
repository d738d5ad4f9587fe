package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// A connection that silently drops packets swallows the COMMIT: neither a
// reply nor an error ever comes. Do must return by the time ctx ends (plus
// the short settling check), release the lock, and report the outcome as
// unknown or not committed, never nil.
func TestCommitOnADeadNetworkReturnsWhenCtxEnds(t *testing.T) {
	faults := newConnFaults()
	e := newEnv(t, envConfig{dial: faults.wrap})
	defer faults.closeHoles()
	must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		return increment(ctx, tx, 1)
	}))

	const deadline = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			faults.blackholeCommit.Store(true)
			return increment(ctx, tx, 1)
		})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(deadline + 5*time.Second):
		t.Fatalf("Do still blocked %v after its %v deadline", 5*time.Second, deadline)
	}
	took := time.Since(start)
	if err == nil || !(errors.Is(err, guard.ErrOutcomeUnknown) || errors.Is(err, guard.ErrNotCommitted)) {
		t.Fatalf("Do = %v, want ErrOutcomeUnknown or ErrNotCommitted", err)
	}
	// ctx's deadline, then at most the settling grace (1 s), then slack.
	if limit := deadline + 1500*time.Millisecond; took > limit {
		t.Fatalf("Do returned after %v, more than %v", took, limit)
	}
	if faults.blackholeCommit.Load() {
		t.Fatal("the fault was not triggered")
	}
	e.assertFree("k")
}

// A ROLLBACK (fn failed) on a connection that stopped answering does not
// keep Do past ctx either.
func TestRollbackOnADeadNetworkReturnsWhenCtxEnds(t *testing.T) {
	faults := newConnFaults()
	e := newEnv(t, envConfig{dial: faults.wrap})
	defer faults.closeHoles()
	const deadline = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			// The next statement (Do's ROLLBACK) goes nowhere.
			faults.blackholeNext.Store(true)
			return errBoom
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errBoom) {
			t.Fatalf("Do = %v, want errBoom", err)
		}
	case <-time.After(deadline + 5*time.Second):
		t.Fatalf("Do still blocked 5s after its deadline")
	}
	if took := time.Since(start); took > deadline+time.Second {
		t.Fatalf("Do returned after %v", took)
	}
	e.assertFree("k")
}
