package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// interval is when one fn ran.
type interval struct{ start, end time.Time }

// With the lock handed on at the claim, and with transactions relayed
// between a key's callers, fn still never runs concurrently for one key and
// no update is lost: the fence row's lock keeps the next holder's claim
// waiting until the previous transaction has ended. The hand-offs must
// really be early: some holders are granted the lock while an fn runs.
func TestHandOffFnNeverOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  guard.Options
		read bool // DoRead, its read sent with the claim
	}{
		{"defaults", guard.Options{}, false},
		{"batch", guard.Options{MaxBatch: 4}, false},
		{"at-end,no-relay", guard.Options{HandOff: guard.HandOffAtEnd, NoRelay: true}, false},
		{"handoff", guard.Options{HandOff: guard.HandOffAtClaim, NoRelay: true}, false},
		{"relay", guard.Options{HandOff: guard.HandOffAtEnd}, false},
		{"handoff+relay", guard.Options{HandOff: guard.HandOffAtClaim}, false},
		{"batch+handoff", guard.Options{MaxBatch: 4, HandOff: guard.HandOffAtClaim, NoRelay: true}, false},
		{"batch+relay", guard.Options{MaxBatch: 4, HandOff: guard.HandOffAtEnd}, false},
		{"batch+handoff+relay", guard.Options{MaxBatch: 4, HandOff: guard.HandOffAtClaim}, false},
		{"ride", guard.Options{ClaimWithFirstStatement: true}, false},
		{"ride+handoff", guard.Options{ClaimWithFirstStatement: true, HandOff: guard.HandOffAtClaim, NoRelay: true}, false},
		{"read", guard.Options{}, true},
		{"read+handoff", guard.Options{HandOff: guard.HandOffAtClaim, NoRelay: true}, true},
		{"read+batch", guard.Options{MaxBatch: 4}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inFn, grantedInFn atomic.Int64
			opt := tc.opt
			opt.Hooks.OnAcquired = func(string, uint64, time.Duration) {
				if inFn.Load() > 0 {
					grantedInFn.Add(1)
				}
			}
			var chained atomic.Int64
			e := newEnv(t, envConfig{guard: &opt, dial: func(c netConn) netConn { return countQueries(c, "CALL redfence_commit_relay('", &chained) }})
			e.db.SetMaxOpenConns(8)
			const callers, each = 12, 8
			var (
				mu        sync.Mutex
				intervals []interval
				overlaps  atomic.Int64
				wg        sync.WaitGroup
				errs      = make(chan error, callers*each)
			)
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						var n int
						fn := func(ctx context.Context, tx *guard.Tx) error {
							if inFn.Add(1) != 1 {
								overlaps.Add(1)
							}
							start := time.Now()
							var err error
							if tc.read {
								_, err = tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = 1", n+1)
							} else {
								err = increment(ctx, tx, 1)
							}
							end := time.Now()
							inFn.Add(-1)
							mu.Lock()
							intervals = append(intervals, interval{start, end})
							mu.Unlock()
							return err
						}
						if tc.read {
							errs <- e.g.DoRead(context.Background(), "k", guard.ReadOne(&n, "SELECT n FROM counters WHERE id = ?", 1), fn)
						} else {
							errs <- e.g.Do(context.Background(), "k", fn)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				must(t, err)
			}
			if n := overlaps.Load(); n != 0 {
				t.Fatalf("%d fn calls started while another fn of the key ran", n)
			}
			sort.Slice(intervals, func(i, j int) bool { return intervals[i].start.Before(intervals[j].start) })
			for i := 1; i < len(intervals); i++ {
				if intervals[i].start.Before(intervals[i-1].end) {
					t.Fatalf("fn intervals %d and %d overlap: %v", i-1, i, intervals[i-1:i+1])
				}
			}
			if n := e.counter(1); n != callers*each {
				t.Fatalf("counter = %d after %d increments: updates were lost", n, callers*each)
			}
			// With ClaimWithFirstStatement the lock is passed on once fn has
			// returned, never while it runs.
			atClaim, relay := tc.opt.HandOff != guard.HandOffAtEnd && !tc.opt.ClaimWithFirstStatement, !tc.opt.NoRelay
			if atClaim && grantedInFn.Load() == 0 {
				t.Fatal("no lock was granted while an fn ran: the hand-off did not happen at the claim")
			}
			if !atClaim && grantedInFn.Load() != 0 {
				t.Fatalf("%d locks granted while an fn ran, with HandOff %v and ClaimWithFirstStatement %v", grantedInFn.Load(), tc.opt.HandOff, tc.opt.ClaimWithFirstStatement)
			}
			if relay != (chained.Load() > 0) {
				t.Fatalf("%d transactions chained to the next caller, with NoRelay %v", chained.Load(), tc.opt.NoRelay)
			}
			// Do returns before its committed connection is released (one
			// round trip later): every connection comes back.
			waitFor(t, "every connection back in the pool after every Do returned", func() bool { return e.db.Stats().InUse == 0 })
			e.assertFree("k")
		})
	}
}

// A holder paused inside fn after handing the lock on keeps the next holder
// out: the next holder gets the lock, but its claim waits for the paused
// transaction, and its fn runs only after that commits, reading its write.
// The paused holder's lock is gone, yet its fn's ctx stays alive and it
// commits.
func TestHandOffPausedHolder(t *testing.T) {
	for _, batch := range []int{0, 4} {
		for _, relay := range []bool{false, true} {
			t.Run(fmt.Sprintf("MaxBatch=%d,relay=%v", batch, relay), func(t *testing.T) { testHandOffPausedHolder(t, batch, relay) })
		}
	}
}

func testHandOffPausedHolder(t *testing.T, maxBatch int, relay bool) {
	granted := make(chan uint64, 4)
	var lost atomic.Int64
	e := newEnv(t, envConfig{guard: &guard.Options{HandOff: guard.HandOffAtClaim, NoRelay: !relay, MaxBatch: maxBatch, Hooks: guard.Hooks{
		OnAcquired: func(_ string, token uint64, _ time.Duration) { granted <- token },
		OnLost:     func(string, uint64) { lost.Add(1) },
	}}})
	ctx := context.Background()
	inside, resume := make(chan uint64), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			inside <- tx.Token()
			<-resume
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("fn's ctx ended after the hand-off: %w", context.Cause(ctx))
			}
			return increment(ctx, tx, 1)
		})
	}()
	firstToken := <-inside
	if tok := <-granted; tok != firstToken {
		t.Fatalf("first grant %d, fn saw token %d", tok, firstToken)
	}

	var secondRan atomic.Bool
	second := make(chan error, 1)
	var secondSaw int
	go func() {
		second <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			secondRan.Store(true)
			if tx.Token() <= firstToken {
				return fmt.Errorf("second token %d not above the first's %d", tx.Token(), firstToken)
			}
			return tx.GetContext(ctx, &secondSaw, "SELECT n FROM counters WHERE id = 1")
		})
	}()
	// The second caller gets the lock while the first is paused in fn...
	if tok := <-granted; tok <= firstToken {
		t.Fatalf("second grant %d, want above %d", tok, firstToken)
	}
	// ...and its claim waits for the first transaction's fence row.
	waitFor(t, "the second holder's claim to wait for the fence row", func() bool {
		return e.running("UPDATE "+fence.Table) == 1
	})
	if secondRan.Load() || len(second) != 0 {
		t.Fatal("the second holder's fn ran while the first holder's transaction was open")
	}
	close(resume)
	must(t, <-first)
	must(t, <-second)
	if secondSaw != 1 {
		t.Fatalf("second fn read %d, want 1 (the first holder's committed write)", secondSaw)
	}
	if n := lost.Load(); n != 0 {
		t.Fatalf("OnLost called %d times: a lock handed on is not lost", n)
	}
	e.assertFree("k")
}

// An attempt that fails after its lock was handed on takes a new turn: the
// next holder, whose claim was waiting for the row, runs first; the retry
// then claims with a new, higher token instead of being fenced, and fn's ctx
// ended as soon as the transaction was lost.
func TestHandOffRetryTakesNewTurn(t *testing.T) {
	for _, batch := range []int{0, 4} {
		for _, relay := range []bool{false, true} {
			t.Run(fmt.Sprintf("MaxBatch=%d,relay=%v", batch, relay), func(t *testing.T) { testHandOffRetryTakesNewTurn(t, batch, relay) })
		}
	}
}

func testHandOffRetryTakesNewTurn(t *testing.T, maxBatch int, relay bool) {
	granted := make(chan uint64, 8)
	e := newEnv(t, envConfig{guard: &guard.Options{HandOff: guard.HandOffAtClaim, NoRelay: !relay, MaxBatch: maxBatch, BackoffMin: time.Millisecond,
		Hooks: guard.Hooks{OnAcquired: func(_ string, token uint64, _ time.Duration) { granted <- token }}}})
	ctx := context.Background()
	var tokens []uint64
	var ctxEnded error
	secondToken := make(chan uint64, 1)
	second := make(chan error, 1)
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		tokens = append(tokens, tx.Token())
		if tx.Attempt() > 1 {
			return increment(ctx, tx, 1)
		}
		<-granted // this attempt's own grant
		go func() {
			second <- e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
				secondToken <- tx.Token()
				return increment(ctx, tx, 1)
			})
		}()
		<-granted // the second caller's: the lock was handed on
		waitFor(t, "the second holder's claim to wait for the fence row", func() bool {
			return e.running("UPDATE "+fence.Table) == 1
		})
		err := killOwnConnection(ctx, t, e, tx)
		ctxEnded = ctx.Err()
		return err
	})
	must(t, err)
	must(t, <-second)
	st := <-secondToken
	if len(tokens) != 2 || !(tokens[0] < st && st < tokens[1]) {
		t.Fatalf("tokens: attempts %v, second caller %d; want attempt 1 < second caller < attempt 2", tokens, st)
	}
	if ctxEnded == nil {
		t.Fatal("fn's ctx did not end when its transaction was lost after the hand-off")
	}
	if n := e.counter(1); n != 2 {
		t.Fatalf("counter = %d, want 2 (the second caller's and attempt 2's)", n)
	}
	e.assertFree("k")
}

// Nested calls, batching and errors of fn keep working with both options.
func TestHandOffNestingAndBatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  guard.Options
	}{
		{"nested", guard.Options{HandOff: guard.HandOffAtClaim}},
		{"batched", guard.Options{HandOff: guard.HandOffAtClaim, MaxBatch: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			e := newEnv(t, envConfig{guard: &opt})
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 4 {
						errs <- e.g.Do(ctx, "a", func(ctx context.Context, tx *guard.Tx) error {
							if err := increment(ctx, tx, 1); err != nil {
								return err
							}
							// Same key: joins this transaction.
							if err := e.g.Do(ctx, "a", func(ctx context.Context, tx *guard.Tx) error {
								return increment(ctx, tx, 1)
							}); err != nil {
								return err
							}
							// Same key, an error: only the nested work is undone.
							if err := e.g.Do(ctx, "a", func(ctx context.Context, tx *guard.Tx) error {
								if err := increment(ctx, tx, 1); err != nil {
									return err
								}
								return errBoom
							}); !errors.Is(err, errBoom) {
								return fmt.Errorf("nested call returned %v, want errBoom", err)
							}
							// Another key: its own lock and transaction.
							return e.g.Do(ctx, "b", func(ctx context.Context, tx *guard.Tx) error {
								return increment(ctx, tx, 2)
							})
						})
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				must(t, err)
			}
			if a, b := e.counter(1), e.counter(2); a != 64 || b != 32 {
				t.Fatalf("counters %d, %d; want 64, 32", a, b)
			}
			waitFor(t, "every connection back in the pool after every Do returned", func() bool { return e.db.Stats().InUse == 0 })
		})
	}
}
