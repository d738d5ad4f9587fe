package galeratest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// With the lock handed on at the claim, the fence row's lock is what keeps
// the next holder out once the Redis lock is handed on. On Galera that lock
// is local to the node the transaction runs on: a next holder on another
// node would claim at once and run fn beside the first holder. Do refuses
// HandOffAtClaim on a Galera pool, before it locks or writes anything; the
// defaults (HandOffAuto) on the same pool hold the lock until the
// transaction ends.
func TestHandOffAtClaimRefusedOnGalera(t *testing.T) {
	w := newWorld(t, 60*time.Second)
	const key = "handoff:1"
	a := w.instance("a", 0, instanceConfig{guard: guard.Options{HandOff: guard.HandOffAtClaim}})
	ran := false
	err := a.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
		ran = true
		return increment(ctx, tx, "refused")
	})
	if !errors.Is(err, guard.ErrUnsafePool) || ran {
		t.Fatalf("Do with HandOffAtClaim on Galera = %v (fn ran: %v), want ErrUnsafePool before fn", err, ran)
	}
	if got := w.counters(); got[0] != 0 {
		t.Fatalf("counters %v after the refused call, want 0", got)
	}
	b := w.instance("b", 0, instanceConfig{})
	err = b.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
		if err := increment(ctx, tx, "b"); err != nil {
			return err
		}
		// Held until the transaction ends: nobody else gets the lock now.
		if lk, err := a.locker.TryLock(ctx, key); !errors.Is(err, redislock.ErrNotAcquired) {
			if lk != nil {
				_ = lk.Unlock(context.Background())
			}
			return fmt.Errorf("TryLock during fn on Galera with the defaults = %v, want ErrNotAcquired", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do with the defaults on the same node: %v", err)
	}
}
