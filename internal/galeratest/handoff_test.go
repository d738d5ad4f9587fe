package galeratest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// With HandOffAtClaim the fence row's lock is what keeps the next holder
// out once the Redis lock is handed on. On Galera that lock is local to the
// node the transaction runs on: a next holder on another node would claim
// at once and run fn beside the first holder. Do refuses the option on a
// Galera pool, before it locks or writes anything; the same pool without it
// runs.
func TestHandOffAtClaimRefusedOnGalera(t *testing.T) {
	w := newWorld(t, 60*time.Second)
	const key = "handoff:1"
	a := w.instance("a", 0, instanceConfig{guard: guard.Options{HandOffAtClaim: true}})
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
	b := w.instance("b", 0, instanceConfig{guard: guard.Options{RelayConns: true}})
	if err := b.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, "b") }); err != nil {
		t.Fatalf("Do without HandOffAtClaim on the same node: %v", err)
	}
}
