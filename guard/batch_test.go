package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

type txFn = func(context.Context, *guard.Tx) error

// queued runs fns as concurrent Do calls of g on key, joining g's batches
// in the order given while the key's lock is held from outside, then
// releases the lock and returns each call's error. ctxs[i], when present
// and not nil, is call i's ctx.
func queued(t *testing.T, e *env, g *guard.Guard, key string, fns []txFn, ctxs ...context.Context) []error {
	t.Helper()
	lk, err := e.locker.Lock(context.Background(), key)
	must(t, err)
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		ctx := context.Background()
		if i < len(ctxs) && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.Do(ctx, key, fn)
		}()
		waitFor(t, fmt.Sprintf("caller %d to join a batch", i), func() bool {
			n, _ := guard.BatchMembers(g, key)
			return n == i+1
		})
	}
	must(t, lk.Unlock(context.Background()))
	wg.Wait()
	return errs
}

func repeat(n int, fn txFn) []txFn {
	fns := make([]txFn, n)
	for i := range fns {
		fns[i] = fn
	}
	return fns
}

func waiters(t *testing.T, e *env, key string) int64 {
	t.Helper()
	n, err := e.rdb.HLen(context.Background(), e.names(key).Waiters).Result()
	must(t, err)
	return n
}

// Callers queued behind the lock share transactions: 40 callers with
// MaxBatch 16 make three batches, each one lock turn, one claim and one
// COMMIT, and wait in the Redis queue as one waiter. No update is lost.
func TestBatchCombinesQueuedCallers(t *testing.T) {
	faults := newConnFaults()
	var mu sync.Mutex
	var results []guard.Result
	claims := 0
	e := newEnv(t, envConfig{dial: faults.wrap, guard: &guard.Options{MaxBatch: 16, Hooks: guard.Hooks{
		OnStep: func(_ context.Context, s guard.Step) {
			if s.Kind == guard.StepClaim && s.Err == nil {
				mu.Lock()
				claims++
				mu.Unlock()
			}
		},
		OnDone: func(_ context.Context, r guard.Result) {
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		},
	}}})
	inc := func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }
	must(t, e.g.Do(context.Background(), "k", inc)) // creates the fence row
	before, err := e.fence("k")
	must(t, err)
	mu.Lock()
	results, claims = nil, 0
	mu.Unlock()
	faults.commits.Store(0)

	lk, err := e.locker.Lock(context.Background(), "k")
	must(t, err)
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- e.g.Do(context.Background(), "k", inc) }()
		waitFor(t, "callers to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
	}
	if _, b := guard.BatchMembers(e.g, "k"); b != 3 {
		t.Fatalf("%d callers make %d batches, want 3 (MaxBatch 16)", n, b)
	}
	if w := waiters(t, e, "k"); w != 1 {
		t.Fatalf("%d waiters in the Redis queue, want 1: only the head batch waits for the lock", w)
	}
	must(t, lk.Unlock(context.Background()))
	for range n {
		must(t, <-errs)
	}

	if got := e.counter(1); got != n+1 {
		t.Fatalf("counter = %d, want %d", got, n+1)
	}
	if c := faults.commits.Load(); c != 3 {
		t.Fatalf("%d COMMITs for %d callers, want 3 (one per batch)", c, n)
	}
	after, err := e.fence("k")
	must(t, err)
	if d := after.Claims - before.Claims; d != 3 {
		t.Fatalf("%d fence claims for %d callers, want 3", d, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if claims != n {
		t.Fatalf("%d claim steps reported, want %d: every member sees its batch's claim", claims, n)
	}
	tokens := map[uint64]int{}
	for _, r := range results {
		if r.Outcome != guard.OutcomeCommitted || r.Attempts != 1 || r.Held <= 0 {
			t.Errorf("result %+v, want committed in 1 attempt with the lock held", r)
		}
		tokens[r.Token]++
	}
	if len(results) != n || len(tokens) != 3 {
		t.Fatalf("%d results with %d tokens, want %d with 3", len(results), len(tokens), n)
	}
	e.assertFree("k")
}

// One member's error undoes only its own work and reaches only it.
func TestBatchMemberErrorIsIsolated(t *testing.T) {
	for _, handOff := range []guard.HandOff{guard.HandOffAuto, guard.HandOffAtEnd} {
		for _, savepoints := range []bool{false, true} {
			t.Run(fmt.Sprintf("handoff=%v,savepoints=%v", handOff, savepoints), func(t *testing.T) {
				testBatchMemberErrorIsIsolated(t, handOff, savepoints)
			})
		}
	}
}

// testBatchMemberErrorIsIsolated: member 1 fails after writing. Its work is
// undone and the others' commits. Without savepoints the batch rolls back
// and runs member 0 again; member 2, which had not run, runs once. The run
// again, with the lock handed on at the claim, takes a new turn and token.
func testBatchMemberErrorIsIsolated(t *testing.T, handOff guard.HandOff, savepoints bool) {
	var mu sync.Mutex
	outcomes := map[guard.Outcome]int{}
	var runs [3]atomic.Int32
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8, BatchSavepoints: savepoints, HandOff: handOff, Hooks: guard.Hooks{
		OnDone: func(_ context.Context, r guard.Result) {
			mu.Lock()
			outcomes[r.Outcome]++
			mu.Unlock()
		},
	}}})
	var tokens [3]uint64
	errs := queued(t, e, e.g, "k", []txFn{
		func(ctx context.Context, tx *guard.Tx) error {
			runs[0].Add(1)
			tokens[0] = tx.Token()
			return increment(ctx, tx, 1)
		},
		func(ctx context.Context, tx *guard.Tx) error {
			runs[1].Add(1)
			tokens[1] = tx.Token()
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			if err := increment(ctx, tx, 2); err != nil {
				return err
			}
			return errBoom
		},
		func(ctx context.Context, tx *guard.Tx) error {
			runs[2].Add(1)
			tokens[2] = tx.Token()
			return increment(ctx, tx, 2)
		},
	})
	want0 := int32(2)
	if savepoints {
		want0 = 1
	}
	if r0, r1, r2 := runs[0].Load(), runs[1].Load(), runs[2].Load(); r0 != want0 || r1 != 1 || r2 != 1 {
		t.Errorf("fn runs %d %d %d, want %d 1 1", r0, r1, r2, want0)
	}
	if errs[0] != nil || !errors.Is(errs[1], errBoom) || errs[2] != nil {
		t.Fatalf("Do = %v; want nil, errBoom, nil", errs)
	}
	switch {
	case savepoints || handOff == guard.HandOffAtEnd:
		if tokens[0] == 0 || tokens[0] != tokens[1] || tokens[1] != tokens[2] {
			t.Fatalf("tokens %v: want one batch", tokens)
		}
	default:
		// Member 1 ran in the first turn; members 0 and 2 ran again in
		// a new one.
		if tokens[1] == 0 || tokens[0] != tokens[2] || tokens[0] <= tokens[1] {
			t.Fatalf("tokens %v: want member 1's below the others', which share a new turn's", tokens)
		}
	}
	if a, b := e.counter(1), e.counter(2); a != 1 || b != 1 {
		t.Fatalf("counters %d %d, want 1 1: the failed member's writes undone, the others' kept", a, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if outcomes[guard.OutcomeCommitted] != 2 || outcomes[guard.OutcomeFailed] != 1 {
		t.Fatalf("outcomes %v, want 2 committed and 1 failed", outcomes)
	}
	e.assertFree("k")
}

// A member whose fn panics: its work is undone, the panic continues on
// the member's own goroutine, and the other members commit.
func TestBatchMemberPanic(t *testing.T) {
	for _, savepoints := range []bool{false, true} {
		t.Run(fmt.Sprintf("savepoints=%v", savepoints), func(t *testing.T) {
			testBatchMemberPanic(t, savepoints)
		})
	}
}

func testBatchMemberPanic(t *testing.T, savepoints bool) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8, BatchSavepoints: savepoints}})
	lk, err := e.locker.Lock(context.Background(), "k")
	must(t, err)
	type outcome struct {
		err       error
		recovered any
		returned  bool
	}
	res := make([]chan outcome, 3)
	for i := range res {
		res[i] = make(chan outcome, 1)
		go func() {
			var o outcome
			defer func() {
				o.recovered = recover()
				res[i] <- o
			}()
			o.err = e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
				if err := increment(ctx, tx, i%2+1); err != nil {
					return err
				}
				if i == 1 {
					panic("member 1")
				}
				return nil
			})
			o.returned = true
		}()
		waitFor(t, "caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
	}
	must(t, lk.Unlock(context.Background()))
	for i, ch := range res {
		o := <-ch
		switch i {
		case 1:
			if o.returned || o.recovered != "member 1" {
				t.Errorf("member 1: returned %v, recovered %v; want its own panic on its goroutine", o.returned, o.recovered)
			}
		default:
			if !o.returned || o.err != nil || o.recovered != nil {
				t.Errorf("member %d: returned %v, err %v, recovered %v; want nil", i, o.returned, o.err, o.recovered)
			}
		}
	}
	if a, b := e.counter(1), e.counter(2); a != 2 || b != 0 {
		t.Fatalf("counters %d %d, want 2 0: the panicking member's write undone", a, b)
	}
	e.assertFree("k")
}

// A member whose ctx ends while it is queued leaves with its ctx's error,
// touching nothing; the others, the batch's starter among them or not,
// still get their turn.
func TestBatchMemberCancelledWhileQueued(t *testing.T) {
	for _, who := range []int{0, 1} {
		t.Run(fmt.Sprintf("member%d", who), func(t *testing.T) {
			e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8}})
			lk, err := e.locker.Lock(context.Background(), "k")
			must(t, err)
			cctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var ran [3]atomic.Bool
			errs := make([]chan error, 3)
			for i := range errs {
				errs[i] = make(chan error, 1)
				ctx := context.Background()
				if i == who {
					ctx = cctx
				}
				go func() {
					errs[i] <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
						ran[i].Store(true)
						return increment(ctx, tx, 1)
					})
				}()
				waitFor(t, "caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
			}
			cancel()
			if err := <-errs[who]; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled member: Do = %v, want context.Canceled", err)
			}
			if w := waiters(t, e, "k"); w != 1 {
				t.Fatalf("%d Redis waiters after one member left, want 1", w)
			}
			must(t, lk.Unlock(context.Background()))
			for i, ch := range errs {
				if i != who {
					must(t, <-ch)
				}
			}
			if ran[who].Load() || e.counter(1) != 2 {
				t.Fatalf("cancelled member ran: %v; counter %d, want 2", ran[who].Load(), e.counter(1))
			}
			e.assertFree("k")
		})
	}
}

// When every member of a waiting batch leaves, the batch gives up its place
// in the Redis queue.
func TestBatchAbandonedLeavesQueue(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8}})
	lk, err := e.locker.Lock(context.Background(), "k")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			errs <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
				t.Error("fn ran")
				return nil
			})
		}()
		waitFor(t, "caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
	}
	waitFor(t, "the batch to wait in the Redis queue", func() bool { return waiters(t, e, "k") == 1 })
	cancel()
	for range 3 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want context.Canceled", err)
		}
	}
	// The Locker takes a waiter whose ctx ended out of the queue in the
	// background.
	waitFor(t, "the batch to leave the Redis queue", func() bool { return waiters(t, e, "k") == 0 })
	if m, b := guard.BatchMembers(e.g, "k"); m != 0 || b != 0 {
		t.Fatalf("%d members in %d batches remain", m, b)
	}
	must(t, lk.Unlock(context.Background()))
	e.assertFree("k")
}

// A member whose fn ran but whose ctx ends while the batch's COMMIT hangs
// returns ErrOutcomeUnknown by its deadline; the last member, whose ctx
// ends later, cuts the COMMIT short and settles it. Nobody gets nil for
// work that did not commit.
func TestBatchMemberCtxEndsDuringCommit(t *testing.T) {
	faults := newConnFaults()
	e := newEnv(t, envConfig{dial: faults.wrap, guard: &guard.Options{MaxBatch: 8}})
	defer faults.closeHoles()
	must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))

	const short, long = time.Second, 2500 * time.Millisecond
	sctx, cancel1 := context.WithTimeout(context.Background(), short)
	defer cancel1()
	lctx, cancel2 := context.WithTimeout(context.Background(), long)
	defer cancel2()
	start := time.Now()
	var took [2]time.Duration
	fn := func(i int) txFn {
		return func(ctx context.Context, tx *guard.Tx) error {
			if i == 1 {
				faults.blackholeCommit.Store(true)
			}
			return increment(ctx, tx, 1)
		}
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	lk, err := e.locker.Lock(context.Background(), "k")
	must(t, err)
	for i, ctx := range []context.Context{sctx, lctx} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.g.Do(ctx, "k", fn(i))
			took[i] = time.Since(start)
		}()
		waitFor(t, "caller to join", func() bool { m, _ := guard.BatchMembers(e.g, "k"); return m == i+1 })
	}
	must(t, lk.Unlock(context.Background()))
	wg.Wait()
	if !errors.Is(errs[0], guard.ErrOutcomeUnknown) {
		t.Errorf("member 0 = %v, want ErrOutcomeUnknown", errs[0])
	}
	if took[0] > short+500*time.Millisecond {
		t.Errorf("member 0 returned after %v, its ctx ended at %v", took[0], short)
	}
	if err := errs[1]; err == nil || !(errors.Is(err, guard.ErrOutcomeUnknown) || errors.Is(err, guard.ErrNotCommitted)) {
		t.Errorf("member 1 = %v, want ErrOutcomeUnknown or ErrNotCommitted", err)
	}
	if took[1] > long+1500*time.Millisecond {
		t.Errorf("member 1 returned after %v, its ctx ended at %v (+ the settling grace)", took[1], long)
	}
	if faults.blackholeCommit.Load() {
		t.Fatal("the fault was not triggered")
	}
	faults.closeHoles()
	waitFor(t, "the server to roll the cut transaction back", func() bool { return e.counter(1) == 0 })
	e.assertFree("k")
}

// A COMMIT that dies with the connection fails or settles every member
// alike: ErrNotCommitted for all when it never arrived, nil for all when
// its reply was lost but it committed. Nothing is applied twice.
func TestBatchCommitKilled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fault     func(*connFaults) *atomic.Bool
		committed bool
	}{
		{"dropped", func(f *connFaults) *atomic.Bool { return &f.dropCommit }, false},
		{"reply lost", func(f *connFaults) *atomic.Bool { return &f.loseCommitReply }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults := newConnFaults()
			e := newEnv(t, envConfig{dial: faults.wrap, guard: &guard.Options{MaxBatch: 8}})
			must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))
			var calls atomic.Int32
			errs := queued(t, e, e.g, "k", repeat(4, func(ctx context.Context, tx *guard.Tx) error {
				if calls.Add(1) == 4 {
					tc.fault(faults).Store(true)
				}
				return increment(ctx, tx, 1)
			}))
			if tc.fault(faults).Load() {
				t.Fatal("the fault was not triggered")
			}
			for i, err := range errs {
				if tc.committed && err != nil || !tc.committed && !errors.Is(err, guard.ErrNotCommitted) {
					t.Errorf("member %d = %v, want committed %v", i, err, tc.committed)
				}
			}
			want := 0
			if tc.committed {
				want = 4
			}
			if n, c := e.counter(1), calls.Load(); n != want || c != 4 {
				t.Fatalf("counter %d after %d calls, want %d after 4", n, c, want)
			}
			e.assertFree("k")
		})
	}
}

// A failure of the transaction itself (here its connection killed in one
// member's fn) retries the whole batch: every member runs again, once.
func TestBatchRetriedAsAWhole(t *testing.T) {
	retries := 0
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8, BackoffMin: time.Millisecond,
		Hooks: guard.Hooks{OnRetry: func(string, int, error) { retries++ }}}})
	var calls [3]atomic.Int32
	fns := make([]txFn, 3)
	for i := range fns {
		fns[i] = func(ctx context.Context, tx *guard.Tx) error {
			calls[i].Add(1)
			if i == 2 && tx.Attempt() == 1 {
				return killOwnConnection(ctx, t, e, tx)
			}
			return increment(ctx, tx, 1)
		}
	}
	errs := queued(t, e, e.g, "k", fns)
	for i, err := range errs {
		if err != nil {
			t.Errorf("member %d = %v", i, err)
		}
	}
	for i := range calls {
		if c := calls[i].Load(); c != 2 {
			t.Errorf("member %d ran %d times, want 2", i, c)
		}
	}
	if retries != 1 || e.counter(1) != 3 {
		t.Fatalf("%d retries, counter %d; want 1 and 3", retries, e.counter(1))
	}
	e.assertFree("k")
}

// A statement that would end the transaction fails the whole batch: the
// member that ran it gets ErrImplicitCommit, the others ErrNotCommitted,
// and nothing is written.
func TestBatchImplicitCommitFailsTheBatch(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8}})
	inc := func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }
	errs := queued(t, e, e.g, "k", []txFn{inc, func(ctx context.Context, tx *guard.Tx) error {
		if err := inc(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "COMMIT")
		return err
	}, inc})
	if !errors.Is(errs[1], guard.ErrImplicitCommit) {
		t.Errorf("member 1 = %v, want ErrImplicitCommit", errs[1])
	}
	for _, i := range []int{0, 2} {
		if !errors.Is(errs[i], guard.ErrNotCommitted) {
			t.Errorf("member %d = %v, want ErrNotCommitted", i, errs[i])
		}
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter %d, want 0", n)
	}
	e.assertFree("k")
}

// Do inside a member's fn, with fn's ctx, on the same key joins the batch's
// transaction.
func TestBatchNestedCallJoins(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8}})
	errs := queued(t, e, e.g, "k", repeat(2, func(ctx context.Context, outer *guard.Tx) error {
		return e.g.Do(ctx, "k", func(ctx context.Context, inner *guard.Tx) error {
			if inner != outer {
				t.Error("nested Do did not join the batch's transaction")
			}
			return increment(ctx, inner, 1)
		})
	}))
	for _, err := range errs {
		must(t, err)
	}
	if n := e.counter(1); n != 2 {
		t.Fatalf("counter %d, want 2", n)
	}
}

// Batching does not take the key from other processes: a Guard with its own
// Locker on the same key gets its turns in FIFO order while a batching
// Guard's callers keep the key busy.
func TestBatchLeavesTurnsToOtherProcesses(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 16}})
	l2 := redislock.New(e.rdb, &redislock.Options{Prefix: e.prefix})
	t.Cleanup(func() { _ = l2.Close() })
	other := guard.New(l2, e.db, nil)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var batched, unknown atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
				switch {
				case err == nil:
					batched.Add(1)
				case ctx.Err() == nil:
					t.Errorf("batched Do = %v", err)
				case errors.Is(err, guard.ErrOutcomeUnknown):
					// Stopped while its work waited for the batch's COMMIT,
					// which may still have happened.
					unknown.Add(1)
				}
			}
		}()
	}
	waitFor(t, "the batching Guard to commit", func() bool { return batched.Load() > 0 })
	const turns = 5
	for i := range turns {
		before := batched.Load()
		octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := other.Do(octx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
		cancel()
		if err != nil {
			t.Fatalf("turn %d of the other Guard: %v", i, err)
		}
		waitFor(t, "the batching Guard to commit again", func() bool { return batched.Load() > before })
	}
	stop()
	wg.Wait()
	a, b := e.counter(1), e.counter(2)
	if int64(a) < batched.Load() || int64(a) > batched.Load()+unknown.Load() || b != turns {
		t.Fatalf("counters %d %d, want %d (+ up to %d whose outcome was unknown) and %d",
			a, b, batched.Load(), unknown.Load(), turns)
	}
	e.assertFree("k")
}

func TestBatchOptionValidated(t *testing.T) {
	e := newEnv(t, envConfig{})
	g := guard.New(e.locker, e.db, &guard.Options{MaxBatch: -1})
	err := g.Do(context.Background(), "k", func(context.Context, *guard.Tx) error { return nil })
	if !errors.Is(err, guard.ErrInvalidOptions) {
		t.Fatalf("Do = %v, want ErrInvalidOptions", err)
	}
}

// The lock is lost during one member's turn: that member's fn is cancelled
// and its work undone, members after it do not run, and the work of members
// before it, whose fn returned before the loss, commits (the transaction
// holds the fence row since its claim, as for one caller).
func TestBatchLockLostMidBatch(t *testing.T) {
	for _, savepoints := range []bool{false, true} {
		t.Run(fmt.Sprintf("savepoints=%v", savepoints), func(t *testing.T) {
			testBatchLockLostMidBatch(t, savepoints)
		})
	}
}

// testBatchLockLostMidBatch: the lock is lost while member 1 runs. With
// savepoints, member 1's work is rolled back to its savepoint and member
// 0's commits. Without, undoing member 1 rolls the whole transaction back,
// and the lost lock keeps it from running again: member 0 learns that too.
// Either way member 2 never runs.
func testBatchLockLostMidBatch(t *testing.T, savepoints bool) {
	e := newEnv(t, envConfig{
		lock:  &redislock.Options{LeaseTTL: 300 * time.Millisecond},
		guard: atEnd(guard.Options{MaxBatch: 8, BatchSavepoints: savepoints}),
	})
	var ran2 atomic.Bool
	errs := queued(t, e, e.g, "k", []txFn{
		func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) },
		func(ctx context.Context, tx *guard.Tx) error {
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			must(t, e.rdb.Del(context.Background(), e.names("k").Lock).Err())
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Error("fn's ctx not cancelled after the lock was lost")
			}
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 100 WHERE id = 1")
			return err
		},
		func(ctx context.Context, tx *guard.Tx) error { ran2.Store(true); return increment(ctx, tx, 1) },
	})
	want0, wantN := 1, 1
	if !savepoints {
		want0, wantN = 0, 0
	}
	switch {
	case want0 == 1 && errs[0] != nil:
		t.Errorf("member 0 = %v, want nil", errs[0])
	case want0 == 0 && !errors.Is(errs[0], guard.ErrLockLost):
		t.Errorf("member 0 = %v, want ErrLockLost", errs[0])
	}
	for _, i := range []int{1, 2} {
		if !errors.Is(errs[i], guard.ErrLockLost) {
			t.Errorf("member %d = %v, want ErrLockLost", i, errs[i])
		}
	}
	if ran2.Load() || e.counter(1) != wantN {
		t.Fatalf("member 2 ran: %v; counter %d, want %d", ran2.Load(), e.counter(1), wantN)
	}
}

// After one member's error has made a batch run again, further errors are
// undone by savepoints: the batch runs again at most once per batch, not
// once per failing member.
func TestBatchRerunsOnceThenUsesSavepoints(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8}})
	var runs [4]atomic.Int32
	fns := make([]txFn, 4)
	for i := range fns {
		fns[i] = func(ctx context.Context, tx *guard.Tx) error {
			runs[i].Add(1)
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			if i == 1 || i == 2 {
				return errBoom
			}
			return nil
		}
	}
	errs := queued(t, e, e.g, "k", fns)
	if errs[0] != nil || !errors.Is(errs[1], errBoom) || !errors.Is(errs[2], errBoom) || errs[3] != nil {
		t.Fatalf("Do = %v; want nil, errBoom, errBoom, nil", errs)
	}
	var got [4]int32
	for i := range runs {
		got[i] = runs[i].Load()
	}
	if got != [4]int32{2, 1, 1, 1} {
		t.Fatalf("fn runs %v, want [2 1 1 1]", got)
	}
	if n := e.counter(1); n != 2 {
		t.Fatalf("counter %d, want 2: members 0 and 3 committed once each", n)
	}
	e.assertFree("k")
}

// With the lock handed on at the claim, a batch that rolls back to run its
// other members again without a failed one takes a new turn and token: the
// next holder may already have claimed the row. The work still lands once.
func TestBatchRerunAfterHandOffTakesNewTurn(t *testing.T) {
	e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: 8, HandOff: guard.HandOffAtClaim}})
	var tokens0 []uint64
	var mu sync.Mutex
	errs := queued(t, e, e.g, "k", []txFn{
		func(ctx context.Context, tx *guard.Tx) error {
			mu.Lock()
			tokens0 = append(tokens0, tx.Token())
			mu.Unlock()
			return increment(ctx, tx, 1)
		},
		func(ctx context.Context, tx *guard.Tx) error {
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			return errBoom
		},
		func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) },
	})
	if errs[0] != nil || !errors.Is(errs[1], errBoom) || errs[2] != nil {
		t.Fatalf("Do = %v; want nil, errBoom, nil", errs)
	}
	if len(tokens0) != 2 || tokens0[1] <= tokens0[0] {
		t.Fatalf("member 0 ran with tokens %v, want two, the second newer", tokens0)
	}
	if a, b := e.counter(1), e.counter(2); a != 1 || b != 1 {
		t.Fatalf("counters %d %d, want 1 1", a, b)
	}
	e.assertFree("k")
}
