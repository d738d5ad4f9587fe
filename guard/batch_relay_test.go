package guard_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// Batched callers that fall back to database mode run one by one and relay
// their transactions as callers of the key of their own, while batches of
// the key come and go: no update is lost and none is counted twice.
func TestBatchFallbackWithRelay(t *testing.T) {
	f := newFBEnv(t, guard.Options{FallbackAfter: 1, FallbackRetry: time.Hour, MaxBatch: 4, HandOff: guard.HandOffAtEnd})
	f.srv.Kill()
	deadline := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := f.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
				cancel()
				if err == nil {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("ok %d failed %d counter %d", ok.Load(), failed.Load(), f.counter(1))
	if int64(f.counter(1)) != ok.Load() {
		t.Fatalf("counter %d, %d Do calls returned nil", f.counter(1), ok.Load())
	}
}

// A member's ctx ends while one of its statements runs, with and without
// savepoints, hand-off and relay: the others commit exactly once, the
// cancelled one gets an error, and no connection is left in use.
func TestBatchMemberCtxEndsMidStatement(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  guard.Options
	}{
		{"plain", guard.Options{MaxBatch: 8}},
		{"handoff+relay", guard.Options{MaxBatch: 8, HandOff: guard.HandOffAtClaim}},
		{"savepoints+handoff+relay", guard.Options{MaxBatch: 8, HandOff: guard.HandOffAtClaim, BatchSavepoints: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			e := newEnv(t, envConfig{guard: &opt})
			cctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errs := queued(t, e, e.g, "k", []txFn{
				func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) },
				func(ctx context.Context, tx *guard.Tx) error {
					if err := increment(ctx, tx, 1); err != nil {
						return err
					}
					time.AfterFunc(200*time.Millisecond, cancel)
					_, err := tx.ExecContext(ctx, "SELECT SLEEP(3)")
					return err
				},
				func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) },
			}, nil, cctx)
			if errs[0] != nil || errs[1] == nil || errs[2] != nil {
				t.Errorf("Do = %v; want nil, error, nil", errs)
			}
			if a, b := e.counter(1), e.counter(2); a != 1 || b != 1 {
				t.Fatalf("counters %d %d, want 1 1", a, b)
			}
			// Do returns before its committed connection is released (one
			// round trip later): every connection comes back.
			waitFor(t, "every connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })
			e.assertFree("k")
		})
	}
}
