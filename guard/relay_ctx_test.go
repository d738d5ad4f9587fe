package guard_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// Do returns by the time its ctx ends, even when a relayed transaction it
// waits for cannot be given back. A commits with COMMIT AND CHAIN while B
// is under way and parks the chained transaction; nobody takes it, and its
// give-back ROLLBACK meets a database that stopped answering. B, the key's
// last Do here, waits for that give-back only until its ctx ends, then cuts
// it short (closing the connection) instead of waiting up to UnlockTimeout.
func TestRelayGiveBackEndsWithCtx(t *testing.T) {
	faults := newConnFaults()
	var armed atomic.Bool
	e := newEnv(t, envConfig{dial: faults.wrap, guard: &guard.Options{Hooks: guard.Hooks{
		OnCommitted: func(string, uint64, time.Duration) {
			if armed.CompareAndSwap(false, true) {
				faults.blackholeNext.Store(true) // the next statement written: the parked leg's ROLLBACK
			}
		},
	}}})
	t.Cleanup(faults.closeHoles)
	inA, resumeA := make(chan struct{}), make(chan struct{})
	a := make(chan error, 1)
	go func() {
		a <- e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
			close(inA)
			<-resumeA
			return increment(ctx, tx, 1)
		})
	}()
	<-inA
	ctxB, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	deadline, _ := ctxB.Deadline()
	b := make(chan error, 1)
	go func() {
		b <- e.g.Do(ctxB, "k", func(ctx context.Context, tx *guard.Tx) error {
			<-ctx.Done() // a slow fn that honours its ctx, and runs no statement
			return context.Cause(ctx)
		})
	}()
	waitFor(t, "B's claim to wait for the fence row", func() bool { return e.running("UPDATE "+fence.Table) == 1 })
	close(resumeA)
	must(t, <-a)
	errB := <-b
	late := time.Since(deadline)
	t.Logf("B returned %v after its ctx ended: %v", late.Round(time.Millisecond), errB)
	if late > time.Second {
		t.Errorf("Do returned %v after its ctx ended, waiting for a relayed leg's give-back", late)
	}
}
