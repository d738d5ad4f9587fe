package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// The server commits but its reply is lost with the connection: Do reads the
// fence row, finds its operation id and reports success; fn ran once.
func TestCommitReplyLostButCommitted(t *testing.T) {
	faults := &connFaults{}
	committed := 0
	e := newEnv(t, envConfig{dial: faults.wrap, guard: &guard.Options{Hooks: guard.Hooks{
		OnCommitted: func(string, uint64, time.Duration) { committed++ },
	}}})
	ctx := context.Background()
	faults.loseCommitReply.Store(true)
	calls := 0
	var opID string
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		calls++
		opID = tx.OpID()
		return increment(ctx, tx, 1)
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil: the transaction committed", err)
	}
	if faults.loseCommitReply.Load() {
		t.Fatal("the fault was not triggered")
	}
	if calls != 1 || e.counter(1) != 1 || committed != 1 {
		t.Fatalf("calls %d, counter %d, OnCommitted %d; want 1, 1, 1", calls, e.counter(1), committed)
	}
	if f, err := e.fence("k"); err != nil || f.OpID != opID {
		t.Fatalf("fence %+v %v, want op %s", f, err, opID)
	}
	e.assertFree("k")
}

// The connection dies before COMMIT reaches the server: Do finds the fence
// row without its operation id and reports ErrNotCommitted; nothing applied.
func TestCommitNeverArrivedIsNotCommitted(t *testing.T) {
	faults := &connFaults{}
	e := newEnv(t, envConfig{dial: faults.wrap})
	ctx := context.Background()
	inc := func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }
	must(t, e.g.Do(ctx, "k", inc)) // the fence row exists from now on

	faults.dropCommit.Store(true)
	calls := 0
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { calls++; return inc(ctx, tx) })
	if !errors.Is(err, guard.ErrNotCommitted) || errors.Is(err, guard.ErrOutcomeUnknown) {
		t.Fatalf("Do = %v, want ErrNotCommitted", err)
	}
	if calls != 1 || e.counter(1) != 1 {
		t.Fatalf("calls %d (want 1: an unknown outcome is never retried blindly), counter %d (want 1)", calls, e.counter(1))
	}
	e.assertFree("k")

	// The same on a key whose fence row the lost transaction would have created.
	// The fault is set inside fn: the COMMIT that creates the fence row
	// (fence.Ensure, before the transaction) must go through.
	err = e.g.Do(ctx, "fresh", func(ctx context.Context, tx *guard.Tx) error {
		faults.dropCommit.Store(true)
		return inc(ctx, tx)
	})
	if !errors.Is(err, guard.ErrNotCommitted) || e.counter(1) != 1 {
		t.Fatalf("fresh key: Do = %v, counter %d", err, e.counter(1))
	}
}

// The check that settles an unknown outcome must not answer while the
// server still runs the transaction (a COMMIT in flight, a dead client not
// yet noticed): it waits for the fence row lock, then sees the final state.
// A plain read would see the old row and wrongly answer "not committed".
func TestSettleWaitsForTransactionInFlight(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	tx, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer func() { _ = tx.Rollback() }()
	must(t, fence.ClaimOp(ctx, tx, e.g.FenceResource("k"), 42, "owner", "op-1"))

	type answer struct {
		committed bool
		err       error
	}
	done := make(chan answer, 1)
	go func() {
		c, err := guard.Settle(ctx, e.g, "k", 42, "op-1")
		done <- answer{c, err}
	}()
	waitFor(t, "the settling read to wait for the fence row", func() bool {
		return e.running("SELECT token, owner, op_id") == 1
	})
	select {
	case a := <-done:
		t.Fatalf("settled (%v, %v) while the transaction was still open", a.committed, a.err)
	default:
	}
	must(t, tx.Commit())
	if a := <-done; !a.committed || a.err != nil {
		t.Fatalf("settle = %v, %v; want committed", a.committed, a.err)
	}
	// And an operation that did not land is reported as such.
	if c, err := guard.Settle(ctx, e.g, "k", 42, "op-2"); c || err != nil {
		t.Fatalf("settle of another op = %v, %v; want not committed", c, err)
	}
	// A newer claim that replaced an older token than ours: ours was not
	// in the row, so it did not commit.
	if c, err := guard.Settle(ctx, e.g, "k", 41, "op-0"); c || err != nil {
		t.Fatalf("settle under a newer token that replaced an older one = %v, %v; want not committed", c, err)
	}
	// One more claim: the row now names 43 and, as the one it replaced,
	// 42 (op-1), which therefore committed; of 41 it can no longer tell.
	tx2, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	must(t, fence.ClaimOp(ctx, tx2, e.g.FenceResource("k"), 43, "owner", "op-3"))
	must(t, tx2.Commit())
	if c, err := guard.Settle(ctx, e.g, "k", 42, "op-1"); !c || err != nil {
		t.Fatalf("settle of the op the newer claim replaced = %v, %v; want committed", c, err)
	}
	if c, err := guard.Settle(ctx, e.g, "k", 42, "op-2"); c || err == nil {
		t.Fatalf("settle of another op of the replaced token = %v, %v; want an error (cannot tell)", c, err)
	}
	if c, err := guard.Settle(ctx, e.g, "k", 41, "op-0"); c || err == nil {
		t.Fatalf("settle under two newer tokens = %v, %v; want an error (cannot tell)", c, err)
	}
}
