package guard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// A Guard built with the option groups behaves as one built with the
// deprecated flat fields they replace. These tests observe one behaviour of
// each group through both forms; options_test.go checks that every field
// normalises alike.

// Batch.Max combines the callers queued behind a key's lock as MaxBatch does:
// 8 callers with a maximum of 4 make two batches, two COMMITs.
func TestOptionGroupBatchCombinesCallers(t *testing.T) {
	for name, opt := range map[string]guard.Options{
		"MaxBatch":  {MaxBatch: 4},
		"Batch.Max": {Batch: guard.BatchOptions{Max: 4}},
	} {
		t.Run(name, func(t *testing.T) {
			faults := newConnFaults()
			e := newEnv(t, envConfig{dial: faults.wrap, guard: &opt})
			inc := func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }
			must(t, e.g.Do(context.Background(), "k", inc)) // creates the fence row
			faults.commits.Store(0)

			lk, err := e.locker.Lock(context.Background(), "k")
			must(t, err)
			const n = 8
			errs := make(chan error, n)
			for i := range n {
				go func() { errs <- e.g.Do(context.Background(), "k", inc) }()
				waitFor(t, "callers to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
			}
			if _, b := guard.BatchMembers(e.g, "k"); b != 2 {
				t.Fatalf("%d callers make %d batches, want 2 (%s 4)", n, b, name)
			}
			must(t, lk.Unlock(context.Background()))
			for range n {
				must(t, <-errs)
			}
			if c := faults.commits.Load(); c != 2 {
				t.Fatalf("%d COMMITs for %d callers, want 2 (one per batch)", c, n)
			}
			if got := e.counter(1); got != n+1 {
				t.Fatalf("counter = %d, want %d", got, n+1)
			}
			e.assertFree("k")
		})
	}
}

// Outage.Fallback keeps Do committing in database mode while Redis is away,
// as Fallback does; without either, Do fails.
func TestOptionGroupOutageFallsBackToDatabase(t *testing.T) {
	for _, c := range []struct {
		name     string
		opt      guard.Options
		fallback bool
	}{
		{"Fallback", guard.Options{Fallback: guard.FallbackDatabase, FallbackAfter: 1, FallbackRetry: time.Minute}, true},
		{"Outage", guard.Options{Outage: guard.OutageOptions{Fallback: guard.FallbackDatabase, After: 1, Retry: time.Minute}}, true},
		{"none", guard.Options{Outage: guard.OutageOptions{After: 1, Retry: time.Minute}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFBEnv(t, guard.Options{})
			var mu sync.Mutex
			var results []guard.Result
			opt := c.opt
			opt.Namespace = f.prefix
			opt.Hooks.OnDone = func(_ context.Context, r guard.Result) {
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
			f.g = guard.New(f.locker, f.db, &opt)
			must(t, f.g.Err())
			f.srv.Kill()
			err := f.do(t, 5*time.Second)
			if !c.fallback {
				if err == nil {
					t.Fatal("Redis killed, no fallback: Do succeeded")
				}
				if n := f.counter(1); n != 0 {
					t.Fatalf("counter %d without Redis or fallback", n)
				}
				return
			}
			must(t, err)
			mu.Lock()
			defer mu.Unlock()
			if r := results[len(results)-1]; r.Mode != guard.ModeDatabase || r.Outcome != guard.OutcomeCommitted {
				t.Fatalf("Redis killed: result %+v, want committed in database mode", r)
			}
			if n := f.counter(1); n != 1 {
				t.Fatalf("counter %d, want 1", n)
			}
		})
	}
}

// Succession.HandOff and Succession.NoRelay decide, as HandOff and NoRelay
// do, whether the next holder is granted the lock while fn runs and whether
// a committing Do chains a transaction to the key's next caller.
func TestOptionGroupSuccession(t *testing.T) {
	for _, c := range []struct {
		name           string
		opt            guard.Options
		atClaim, relay bool
	}{
		{"flat at-end no-relay", guard.Options{HandOff: guard.HandOffAtEnd, NoRelay: true}, false, false},
		{"group at-end no-relay", guard.Options{Succession: guard.SuccessionOptions{HandOff: guard.HandOffAtEnd, NoRelay: true}}, false, false},
		{"group at-claim relay", guard.Options{Succession: guard.SuccessionOptions{HandOff: guard.HandOffAtClaim}}, true, true},
		{"group at-end relay", guard.Options{Succession: guard.SuccessionOptions{HandOff: guard.HandOffAtEnd}}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var inFn, grantedInFn, chained atomic.Int64
			opt := c.opt
			opt.Hooks.OnAcquired = func(string, uint64, time.Duration) {
				if inFn.Load() > 0 {
					grantedInFn.Add(1)
				}
			}
			e := newEnv(t, envConfig{guard: &opt, dial: func(c netConn) netConn { return countQueries(c, "CALL redfence_commit_relay('", &chained) }})
			e.db.SetMaxOpenConns(8)
			const callers, each = 12, 8
			var wg sync.WaitGroup
			errs := make(chan error, callers*each)
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						errs <- e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
							inFn.Add(1)
							defer inFn.Add(-1)
							return increment(ctx, tx, 1)
						})
					}
				}()
			}
			wg.Wait()
			close(errs)
			var all []error
			for err := range errs {
				all = append(all, err)
			}
			must(t, errors.Join(all...))
			if n := e.counter(1); n != callers*each {
				t.Fatalf("counter = %d after %d increments", n, callers*each)
			}
			if got := grantedInFn.Load() > 0; got != c.atClaim {
				t.Fatalf("%d locks granted while an fn ran; want some: %v", grantedInFn.Load(), c.atClaim)
			}
			if got := chained.Load() > 0; got != c.relay {
				t.Fatalf("%d transactions chained to the next caller; want some: %v", chained.Load(), c.relay)
			}
			e.assertFree("k")
		})
	}
}
