package galeratest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// TestServerSidePreparesAreRefused: a brute-force abort that lands on a
// server-side PREPARE is not reported by the node, and the statements after
// it would commit outside the fenced transaction. A Guard whose pool
// prepares on the server (the driver's default) refuses to run on a Galera
// node, with a typed error naming the fix, before it locks or writes
// anything; the same pool with interpolateParams=true runs. The check is
// made once per Guard.
func TestServerSidePreparesAreRefused(t *testing.T) {
	w := newWorld(t, time.Minute)
	prepared := w.open(w.dsns[1]) // no interpolateParams
	in := w.instance("prepares", 1, instanceConfig{db: prepared})
	ctx := w.ctx
	if err := in.g.CheckDatabase(ctx); !errors.Is(err, guard.ErrUnsafePool) || !strings.Contains(err.Error(), "interpolateParams=true") {
		t.Fatalf("CheckDatabase = %v, want ErrUnsafePool naming interpolateParams=true", err)
	}
	for i := range 2 {
		ran := false
		err := in.g.Do(ctx, "counter", func(ctx context.Context, tx *guard.Tx) error {
			ran = true
			return increment(ctx, tx, "refused")
		})
		if !errors.Is(err, guard.ErrUnsafePool) || ran {
			t.Fatalf("call %d: Do = %v (fn ran: %v), want ErrUnsafePool before fn", i+1, err, ran)
		}
	}
	if got := w.counters(); got[0] != 0 {
		t.Fatalf("counter = %v after refused calls, want 0", got)
	}
	var fenceRows int
	if err := w.synced[0].GetContext(ctx, &fenceRows, "SELECT COUNT(*) FROM redfence_fences"); err != nil {
		t.Fatal(err)
	}
	if fenceRows != 0 {
		t.Fatalf("%d fence rows after refused calls, want none", fenceRows)
	}
	n := w.lockNames("counter")
	if exists, err := testenv.Redis(t).Exists(ctx, n.Lock, n.Token, n.Queue).Result(); err != nil || exists != 0 {
		t.Fatalf("%d Redis keys of the lock exist after refused calls (%v), want none", exists, err)
	}

	ok := w.instance("interpolated", 1, instanceConfig{})
	if err := ok.g.Do(ctx, "counter", func(ctx context.Context, tx *guard.Tx) error {
		return increment(ctx, tx, "interpolated")
	}); err != nil {
		t.Fatalf("Do with interpolateParams=true: %v", err)
	}
	if got := w.counters(); got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("counters = %v, want 1 on every node", got)
	}
}
