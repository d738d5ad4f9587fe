package guard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redfence/redfence/guard"
)

// A Tx kept by fn past its Do must be dead once that Do has returned, as
// it is without RelayConns (sql.ErrTxDone): with RelayConns the *sqlx.Tx it
// wraps is the very transaction passed on, chained, to the next caller of
// the key, so a late statement of the previous holder runs inside the next
// holder's fenced transaction and commits with it: a stale holder's write
// lands. The same holds for a member of a batch (MaxBatch), whose batch
// passes its transaction on to the key's next batch.
func TestRelayStaleTxRefDoesNotLand(t *testing.T) {
	for _, batch := range []int{0, 4} {
		for _, relay := range []bool{false, true} {
			t.Run(fmt.Sprintf("relay=%v,MaxBatch=%d", relay, batch), func(t *testing.T) {
				testRelayStaleTxRefDoesNotLand(t, relay, batch)
			})
		}
	}
}

func testRelayStaleTxRefDoesNotLand(t *testing.T, relay bool, maxBatch int) {
	e := newEnv(t, envConfig{guard: &guard.Options{NoRelay: !relay, MaxBatch: maxBatch}})
	ctx := context.Background()
	var kept *guard.Tx
	inA, releaseA := make(chan struct{}), make(chan struct{})
	a := make(chan error, 1)
	go func() {
		a <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			kept = tx
			close(inA)
			<-releaseA
			return increment(ctx, tx, 1)
		})
	}()
	<-inA
	inB, releaseB := make(chan struct{}), make(chan struct{})
	b := make(chan error, 1)
	go func() {
		b <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			close(inB)
			<-releaseB
			return increment(ctx, tx, 1)
		})
	}()
	if maxBatch > 1 {
		waitFor(t, "B to join the next batch", func() bool { _, n := guard.BatchMembers(e.g, "k"); return n == 2 })
	} else {
		waitFor(t, "B to wait for the lock", func() bool { return len(e.redisKeys()) > 0 })
	}
	close(releaseA)
	must(t, <-a)
	<-inB
	// A's Do has returned: its Tx is over. A late write through it:
	_, lateErr := kept.ExecContext(ctx, "UPDATE counters SET n = n + 100 WHERE id = 2")
	close(releaseB)
	must(t, <-b)
	if n := e.counter(2); n != 0 || lateErr == nil {
		t.Fatalf("a statement on a Tx whose Do had returned was accepted (err %v) and counter 2 = %d: it ran in the next holder's transaction", lateErr, n)
	}
}
