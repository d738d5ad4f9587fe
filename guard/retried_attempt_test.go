package guard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// A retried attempt claims the fence row again, like the first: the row
// carries its token and its own operation id while fn runs.
func TestRetriedAttemptClaimsAgain(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{BackoffMin: time.Millisecond}})
	ctx := context.Background()
	var ops []string
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		ops = append(ops, tx.OpID())
		if tx.Attempt() == 1 {
			return killOwnConnection(ctx, t, e, tx)
		}
		f, err := fence.Lookup(ctx, tx, e.g.FenceResource("k"))
		if err != nil {
			return err
		}
		if f.Token != tx.Token() || f.OpID != tx.OpID() || f.Owner != tx.Owner() {
			t.Errorf("attempt 2 sees fence %+v; want its own token %d and op id %q", f, tx.Token(), tx.OpID())
		}
		return increment(ctx, tx, 1)
	})
	must(t, err)
	if len(ops) != 2 || ops[0] == ops[1] {
		t.Fatalf("op ids %q: want two attempts with different ids", ops)
	}
	if f, err := e.fence("k"); err != nil || f.OpID != ops[1] || f.Claims != 1 {
		t.Fatalf("fence after commit %+v, %v; want attempt 2's op id and one claim", f, err)
	}
}

// A retried attempt holds the fence row like the first: a concurrent claim
// with a higher token (a split-brain holder) waits for it to commit, then
// reads its write.
func TestRetriedAttemptHoldsFenceRowAgainstNewerClaim(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{BackoffMin: time.Millisecond}})
	newer := splitGuard(t, e, guard.Options{})
	ctx := context.Background()
	newerDone := make(chan error, 1)
	var newerSaw atomic.Int64
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if tx.Attempt() == 1 {
			return killOwnConnection(ctx, t, e, tx)
		}
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		go func() {
			newerDone <- newer.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
				var n int
				if err := tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = 1"); err != nil {
					return err
				}
				newerSaw.Store(int64(n))
				return nil
			})
		}()
		waitFor(t, "the newer holder's claim to wait for attempt 2's fence row", func() bool {
			return e.running("UPDATE "+fence.Table) == 1 || len(newerDone) == 1
		})
		if len(newerDone) == 1 {
			t.Error("the newer holder finished while attempt 2 held the key")
		}
		return nil
	})
	must(t, err)
	must(t, <-newerDone)
	if newerSaw.Load() != 1 {
		t.Fatalf("newer holder read %d, want 1 (attempt 2's committed write)", newerSaw.Load())
	}
}

// Attempt 2 commits but its reply is lost: Do settles the outcome from the
// fence row (attempt 2's op id) and reports success, applied exactly once.
func TestRetriedAttemptCommitReplyLostSettlesOnce(t *testing.T) {
	faults := &connFaults{}
	var committed atomic.Int32
	e := newEnv(t, envConfig{dial: faults.wrap, guard: &guard.Options{BackoffMin: time.Millisecond,
		Hooks: guard.Hooks{OnCommitted: func(string, uint64, time.Duration) { committed.Add(1) }}}})
	ctx := context.Background()
	calls := 0
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		calls++
		if tx.Attempt() == 1 {
			return killOwnConnection(ctx, t, e, tx)
		}
		faults.loseCommitReply.Store(true)
		return increment(ctx, tx, 1)
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil: attempt 2 committed", err)
	}
	if faults.loseCommitReply.Load() {
		t.Fatal("the fault was not triggered")
	}
	if calls != 2 || e.counter(1) != 1 || committed.Load() != 1 {
		t.Fatalf("calls %d, counter %d, OnCommitted %d; want 2, 1, 1", calls, e.counter(1), committed.Load())
	}
}

// Attempt 1 fails; before attempt 2 a newer holder claims and commits (the
// lock was lost meanwhile). Attempt 2's claim is rejected: ErrFenced, fn
// does not run again, and only the newer holder's write is there.
func TestRetriedAttemptAfterNewerClaimIsFenced(t *testing.T) {
	e := newEnv(t, envConfig{})
	newer := splitGuard(t, e, guard.Options{})
	ctx := context.Background()
	var newerErr error
	// The retry keeps its turn and token (HandOffAtEnd); with the lock
	// handed on at the claim it would take a new turn and token.
	g := guard.New(e.locker, e.db, &guard.Options{HandOff: guard.HandOffAtEnd, NoRelay: true, BackoffMin: time.Millisecond, Namespace: e.prefix,
		Hooks: guard.Hooks{OnRetry: func(string, int, error) {
			newerErr = newer.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
				return increment(ctx, tx, 1)
			})
		}}})
	calls := 0
	err := g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		calls++
		if tx.Attempt() == 1 {
			return killOwnConnection(ctx, t, e, tx)
		}
		return increment(ctx, tx, 1)
	})
	must(t, newerErr)
	if !errors.Is(err, guard.ErrFenced) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Do = %v, want ErrFenced on attempt 2", err)
	}
	if calls != 1 || e.counter(1) != 1 {
		t.Fatalf("fn ran %d times, counter %d; want 1 and 1 (the newer holder's write only)", calls, e.counter(1))
	}
}

// A token equal to the one the fence row holds, presented by another owner,
// is stale end to end: a raw transaction replaying a committed Do's token
// is rejected and changes nothing.
func TestEqualTokenFromAnotherOwnerIsRejected(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	var token uint64
	var owner string
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		token, owner = tx.Token(), tx.Owner()
		return increment(ctx, tx, 1)
	}))
	tx, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer func() { _ = tx.Rollback() }()
	err = fence.ClaimOp(ctx, tx, e.g.FenceResource("k"), token, owner+"-replayed", "replay-op")
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("claim with the committed token %d by another owner = %v, want ErrStale", token, err)
	}
	_ = tx.Rollback()
	if f, err := e.fence("k"); err != nil || f.Owner != owner || f.Claims != 1 {
		t.Fatalf("fence %+v, %v: the rejected claim changed it", f, err)
	}
}
