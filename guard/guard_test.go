package guard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

func TestDoRunsOneFencedTransaction(t *testing.T) {
	for _, handOff := range []guard.HandOff{guard.HandOffAuto, guard.HandOffAtEnd} {
		t.Run(handOff.String(), func(t *testing.T) { testDoRunsOneFencedTransaction(t, handOff) })
	}
}

func testDoRunsOneFencedTransaction(t *testing.T, handOff guard.HandOff) {
	var mu sync.Mutex
	var events []string
	var acquiredToken uint64
	record := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	e := newEnv(t, envConfig{guard: &guard.Options{HandOff: handOff, Hooks: guard.Hooks{
		OnAcquired:  func(key string, token uint64, wait time.Duration) { acquiredToken = token; record("acquired") },
		OnCommitted: func(key string, token uint64, elapsed time.Duration) { record("committed") },
	}}})
	ctx := context.Background()
	const key = "acct:1"
	var opID string
	err := e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
		record("fn")
		if tx.Key() != key || tx.Token() != acquiredToken || tx.Attempt() != 1 || tx.Owner() == "" {
			t.Errorf("tx: key %q token %d attempt %d owner %q; lock token %d", tx.Key(), tx.Token(), tx.Attempt(), tx.Owner(), acquiredToken)
		}
		// The claim already ran in this transaction.
		f, err := fence.Lookup(ctx, tx, e.g.FenceResource(key))
		if err != nil || f.Token != tx.Token() || f.OpID != tx.OpID() || f.Owner != tx.Owner() {
			t.Errorf("fence inside fn = %+v, %v; want token %d op %q", f, err, tx.Token(), tx.OpID())
		}
		// Held until the transaction ends, others cannot take the lock
		// meanwhile (by default it is handed on at the claim, and the
		// fence row's lock keeps them out: see TestHandOffFnNeverOverlaps).
		if handOff == guard.HandOffAtEnd {
			if _, err := e.locker.TryLock(ctx, key); !errors.Is(err, redislock.ErrNotAcquired) {
				t.Errorf("TryLock during fn = %v, want ErrNotAcquired", err)
			}
		}
		opID = tx.OpID()
		return increment(ctx, tx, 1)
	})
	must(t, err)
	if got := strings.Join(events, ","); got != "acquired,fn,committed" {
		t.Fatalf("events = %s", got)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1", n)
	}
	f, err := e.fence(key)
	if err != nil || f.Token != acquiredToken || f.OpID != opID {
		t.Fatalf("fence after commit = %+v, %v", f, err)
	}
	e.assertFree(key)
}

// Callers queued for a key hold no database connection. With the lock held
// until the transaction ends, only the holder holds one; by default, the
// lock is handed on at the claim, and the next holder holds one too while
// its claim waits for the fence row: two in all, however many queue.
func TestQueuedCallersHoldNoConnection(t *testing.T) {
	for _, handOff := range []guard.HandOff{guard.HandOffAuto, guard.HandOffAtEnd} {
		t.Run(handOff.String(), func(t *testing.T) { testQueuedCallersHoldNoConnection(t, handOff) })
	}
}

func testQueuedCallersHoldNoConnection(t *testing.T, handOff guard.HandOff) {
	e := newEnv(t, envConfig{guard: &guard.Options{HandOff: handOff}})
	const key, waiters = "hot", 20
	ctx := context.Background()
	entered, hold := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, waiters+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			close(entered)
			<-hold
			return increment(ctx, tx, 1)
		})
	}()
	<-entered
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
		}()
	}
	queue := e.names(key).Queue
	queued, inUse := waiters, 1
	if handOff != guard.HandOffAtEnd {
		queued, inUse = waiters-1, 2
		waitFor(t, "the next holder's claim to wait for the fence row", func() bool {
			return e.running("UPDATE "+fence.Table) == 1
		})
	}
	waitFor(t, fmt.Sprintf("%d callers queued in Redis", queued), func() bool {
		n, err := e.rdb.ZCard(ctx, queue).Result()
		return err == nil && n == int64(queued)
	})
	if s := e.db.Stats(); s.InUse != inUse {
		t.Errorf("%d DB connections in use while %d callers wait, want %d", s.InUse, waiters, inUse)
	}
	close(hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	if n := e.counter(1); n != waiters+1 {
		t.Fatalf("counter = %d, want %d", n, waiters+1)
	}
}

// Concurrent callers of one key lose no update, and each transaction, in the
// order the database ran them, carries a larger token than the one before:
// each writes its token to a log whose AUTO_INCREMENT id, taken after the
// claim, follows the order in which the callers held the fence row. (The
// order of the Dos' returns, or of Hooks.OnCommitted, need not follow it:
// the next holder's claim goes through as soon as the COMMIT is applied,
// before its reply reaches the committer.)
func TestConcurrentCallersLoseNoUpdateAndTokensGrow(t *testing.T) {
	e := newEnv(t, envConfig{})
	testenv.MustExec(t, e.db, "CREATE TABLE token_log (id INT AUTO_INCREMENT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB")
	const workers, each = 8, 10
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := e.g.Do(context.Background(), "hot", func(ctx context.Context, tx *guard.Tx) error {
					if _, err := tx.ExecContext(ctx, "INSERT INTO token_log (token) VALUES (?)", tx.Token()); err != nil {
						return err
					}
					return increment(ctx, tx, 1)
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := e.counter(1); n != workers*each {
		t.Fatalf("counter = %d, want %d: updates were lost", n, workers*each)
	}
	var tokens []uint64
	must(t, e.db.Select(&tokens, "SELECT token FROM token_log ORDER BY id"))
	if len(tokens) != workers*each {
		t.Fatalf("%d transactions logged, want %d", len(tokens), workers*each)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("commit %d has token %d after %d: tokens must grow with each holder", i, tokens[i], tokens[i-1])
		}
	}
}

func TestFnErrorRollsBackAndUnlocks(t *testing.T) {
	e := newEnv(t, envConfig{})
	calls := 0
	err := e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		calls++
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		return fmt.Errorf("business rule: %w", errBoom)
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if calls != 1 || e.counter(1) != 0 {
		t.Fatalf("calls %d (want 1, no retry), counter %d (want 0, rolled back)", calls, e.counter(1))
	}
	// The fence row exists (created before the transaction) but the claim
	// rolled back with it: the row still has the token it was created with.
	if f, err := e.fence("k"); err != nil || f.Token != 0 || f.Claims != 0 {
		t.Fatalf("fence row after rollback: %+v, %v; want token 0, no claims (the claim rolled back too)", f, err)
	}
	e.assertFree("k")
}

func TestPanicRollsBackUnlocksAndRepanics(t *testing.T) {
	e := newEnv(t, envConfig{})
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the panic of fn", r)
			}
		}()
		_ = e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			panic("kaboom")
		})
		t.Fatal("Do returned instead of panicking")
	}()
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter = %d after panic, want 0", n)
	}
	e.assertFree("k")
}

func TestCallerCancelRollsBackAndUnlocks(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := e.g.Do(ctx, "k", func(fctx context.Context, tx *guard.Tx) error {
		if err := increment(fctx, tx, 1); err != nil {
			return err
		}
		cancel()
		<-fctx.Done() // fn's ctx follows the caller's
		_, err := tx.ExecContext(fctx, "UPDATE counters SET n = n + 100 WHERE id = 1")
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter = %d, want 0", n)
	}
	e.assertFree("k") // unlocked although the caller's ctx is cancelled
}

func TestCancelledContextTouchesNothing(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		t.Error("fn called with a cancelled ctx")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v", err)
	}
	if keys := e.redisKeys(); len(keys) != 0 {
		t.Fatalf("Redis keys written: %v", keys)
	}
}

func TestLockLostDuringFnCancelsFnAndRollsBack(t *testing.T) {
	lost := make(chan uint64, 1)
	e := newEnv(t, envConfig{
		lock:  &redislock.Options{LeaseTTL: 300 * time.Millisecond},
		guard: atEnd(guard.Options{Hooks: guard.Hooks{OnLost: func(key string, token uint64) { lost <- token }}}),
	})
	var token uint64
	err := e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		token = tx.Token()
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		// Simulate the lease ending behind the holder's back.
		must(t, e.rdb.Del(context.Background(), e.names("k").Lock).Err())
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Error("fn's ctx not cancelled after the lock was lost")
		}
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 100 WHERE id = 1")
		return err
	})
	if !errors.Is(err, guard.ErrLockLost) || !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("Do = %v, want ErrLockLost and redislock.ErrLost", err)
	}
	if got := <-lost; got != token {
		t.Fatalf("OnLost token %d, want %d", got, token)
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter = %d, want 0 (rolled back)", n)
	}
}

// The lock is lost after fn returned nil, before COMMIT, and a new holder
// starts at once. Do commits anyway: the new holder's claim waits for that
// commit and then reads its write, so both increments land.
func TestLockLostBeforeCommitCommitsSafely(t *testing.T) {
	lostA := make(chan struct{})
	var lostOnce sync.Once
	e := newEnv(t, envConfig{
		lock:  &redislock.Options{LeaseTTL: 300 * time.Millisecond},
		guard: atEnd(guard.Options{Hooks: guard.Hooks{OnLost: func(string, uint64) { lostOnce.Do(func() { close(lostA) }) }}}),
	})
	ctx := context.Background()
	const key = "k"
	var tokenA, tokenB atomic.Uint64
	errB := make(chan error, 1)
	var first atomic.Bool
	guard.SetBeforeCommit(e.g, func(_ context.Context, tx *guard.Tx) {
		if !first.CompareAndSwap(false, true) {
			return // B's commit
		}
		must(t, e.rdb.Del(ctx, e.names(key).Lock).Err())
		<-lostA
		go func() {
			errB <- e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
				tokenB.Store(tx.Token())
				return increment(ctx, tx, 1)
			})
		}()
		waitFor(t, "B's claim to wait for A's fence row", func() bool {
			return e.running("UPDATE "+fence.Table) == 1
		})
	})
	err := e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
		tokenA.Store(tx.Token())
		return increment(ctx, tx, 1)
	})
	if err != nil {
		t.Fatalf("A: Do = %v, want nil (committed after the loss)", err)
	}
	if err := <-errB; err != nil {
		t.Fatalf("B: %v", err)
	}
	if n := e.counter(1); n != 2 {
		t.Fatalf("counter = %d, want 2: an update was lost", n)
	}
	f, err := e.fence(key)
	if err != nil || f.Token != tokenB.Load() || tokenB.Load() <= tokenA.Load() {
		t.Fatalf("fence %+v %v; tokens A %d B %d", f, err, tokenA.Load(), tokenB.Load())
	}
}

func TestStaleTokenIsFencedAndFloorRaised(t *testing.T) {
	type fenced struct{ token, current uint64 }
	onFenced := make(chan fenced, 1)
	var logs syncBuffer
	e := newEnv(t, envConfig{guard: &guard.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Hooks: guard.Hooks{
			OnFenced: func(key string, token, current uint64) { onFenced <- fenced{token, current} },
		}}})
	ctx := context.Background()
	const key = "acct:9"
	inc := func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }
	must(t, e.g.Do(ctx, key, inc))

	// A failover lost Redis's memory of the key while the database has
	// accepted a token from far above anything Redis will mint now.
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	testenv.MustExec(t, e.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", future, e.g.FenceResource(key))
	must(t, e.rdb.Del(ctx, e.names(key).Token).Err())

	called := false
	err := e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error { called = true; return nil })
	if !errors.Is(err, guard.ErrFenced) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Do = %v, want ErrFenced and fence.ErrStale", err)
	}
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Current != future || stale.Token >= future {
		t.Fatalf("StaleError = %+v", stale)
	}
	if called {
		t.Fatal("fn was called with a stale token")
	}
	if got := <-onFenced; got.current != future || got.token != stale.Token {
		t.Fatalf("OnFenced(%d, %d)", got.token, got.current)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1", n)
	}
	e.assertFree(key)

	// Liveness: the next holder gets a token the database accepts.
	var next uint64
	must(t, e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error { next = tx.Token(); return inc(ctx, tx) }))
	if next <= future || e.counter(1) != 2 {
		t.Fatalf("next token %d, want > %d; counter %d", next, future, e.counter(1))
	}
	for _, want := range []string{"level=DEBUG msg=\"guard: lock acquired\"", "level=WARN msg=\"guard: token fenced by the database\"",
		fmt.Sprintf("current=%d", future), "level=DEBUG msg=\"guard: committed\""} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}

func TestTxCommitAndRollbackAreRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		if err := tx.Commit(); !errors.Is(err, guard.ErrTxManaged) {
			t.Errorf("tx.Commit = %v", err)
		}
		if err := tx.Rollback(); !errors.Is(err, guard.ErrTxManaged) {
			t.Errorf("tx.Rollback = %v", err)
		}
		return nil
	}))
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1", n)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// With the defaults the lock is handed on once the claim holds the fence
// row; until then its loss still ends the attempt. Here the claim waits for
// a fence row another transaction holds, the lock is lost meanwhile, and Do
// returns ErrLockLost without running fn.
func TestLockLostBeforeClaimEndsDo(t *testing.T) {
	e := newEnv(t, envConfig{lock: &redislock.Options{LeaseTTL: 300 * time.Millisecond}})
	ctx := context.Background()
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	other, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer func() { _ = other.Rollback() }()
	var token uint64
	must(t, other.GetContext(ctx, &token, "SELECT token FROM "+fence.Table+" WHERE resource = ? FOR UPDATE", e.g.FenceResource("k")))
	var ran atomic.Bool
	res := make(chan error, 1)
	go func() {
		res <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			ran.Store(true)
			return increment(ctx, tx, 1)
		})
	}()
	waitFor(t, "the claim to wait for the fence row", func() bool { return e.running("UPDATE "+fence.Table) == 1 })
	must(t, e.rdb.Del(ctx, e.names("k").Lock).Err())
	select {
	case err = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("Do still waiting 10s after its lock was lost before the claim")
	}
	if !errors.Is(err, guard.ErrLockLost) || ran.Load() {
		t.Fatalf("Do = %v (fn ran: %v), want ErrLockLost before fn", err, ran.Load())
	}
	must(t, other.Rollback())
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1", n)
	}
}
