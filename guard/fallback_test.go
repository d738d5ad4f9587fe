package guard_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// fbEnv is a Guard with the database fallback over a Redis server of the
// test's own, which the test can kill, pause and restart.
type fbEnv struct {
	*env
	srv    *testenv.Server
	rdb    *redis.Client
	locker *redislock.Locker
	g      *guard.Guard

	mu      sync.Mutex
	modes   []string
	results []guard.Result
}

func newFBEnv(t *testing.T, opt guard.Options) *fbEnv {
	t.Helper()
	return newFBEnvDial(t, opt, nil)
}

// newFBEnvDial is newFBEnv whose MySQL connections are wrapped by dial.
func newFBEnvDial(t *testing.T, opt guard.Options, dial func(net.Conn) net.Conn) *fbEnv {
	t.Helper()
	e := newEnv(t, envConfig{dial: dial})
	f := &fbEnv{env: e, srv: testenv.RedisServer(t)}
	// Short timeouts, as a service sets them: a dead Redis must not hold a
	// call for go-redis's default 3 s.
	f.rdb = redis.NewClient(&redis.Options{Addr: f.srv.Addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = f.rdb.Close() })
	f.locker = redislock.New(f.rdb, &redislock.Options{Prefix: e.prefix})
	t.Cleanup(func() { _ = f.locker.Close() })
	f.g = f.newGuard(opt)
	return f
}

// newGuard returns a Guard with the database fallback on f's Locker and
// pool, whose mode changes and results f records.
func (f *fbEnv) newGuard(opt guard.Options) *guard.Guard {
	opt.Fallback = guard.FallbackDatabase
	opt.Namespace = f.prefix
	opt.Hooks.OnModeChange = func(from, to guard.Mode) {
		f.mu.Lock()
		f.modes = append(f.modes, from.String()+"->"+to.String())
		f.mu.Unlock()
	}
	opt.Hooks.OnDone = func(_ context.Context, r guard.Result) {
		f.mu.Lock()
		f.results = append(f.results, r)
		f.mu.Unlock()
	}
	return guard.New(f.locker, f.db, &opt)
}

func (f *fbEnv) lastMode() guard.Mode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.results[len(f.results)-1].Mode
}

func (f *fbEnv) modeChanges() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.modes...)
}

// do runs one increment through the fallback Guard with a deadline.
func (f *fbEnv) do(t *testing.T, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return f.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
}

// Redis killed, then paused, then back: Do keeps committing throughout, in
// database mode while Redis is away, and returns to Redis mode by itself.
func TestFallbackKeepsWorkingWithoutRedis(t *testing.T) {
	f := newFBEnv(t, guard.Options{FallbackAfter: 2, FallbackRetry: 300 * time.Millisecond,
		FallbackProbeAfter: 100 * time.Millisecond, FallbackProbeTimeout: 100 * time.Millisecond})
	must(t, f.do(t, 5*time.Second))
	if m := f.lastMode(); m != guard.ModeRedis {
		t.Fatalf("healthy Redis: mode %v", m)
	}

	// Killed: connections refused.
	f.srv.Kill()
	for i := range 5 {
		start := time.Now()
		if err := f.do(t, 3*time.Second); err != nil {
			t.Fatalf("Redis killed, call %d: Do = %v", i, err)
		}
		if f.lastMode() != guard.ModeDatabase {
			t.Fatalf("Redis killed, call %d: mode %v", i, f.lastMode())
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Redis killed, call %d took %v", i, d)
		}
	}
	if c := f.modeChanges(); len(c) != 1 || c[0] != "redis->database" {
		t.Fatalf("mode changes %v, want one switch to database", c)
	}

	// Back (empty, no persistence): Redis mode again within a bounded time.
	f.srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for f.lastMode() != guard.ModeRedis {
		if time.Now().After(deadline) {
			t.Fatalf("still in database mode 5s after Redis came back; changes %v", f.modeChanges())
		}
		must(t, f.do(t, 3*time.Second))
		time.Sleep(50 * time.Millisecond) // pacing calls, not synchronisation
	}

	// Paused (SIGSTOP): calls wait on a Redis that never answers; the probe
	// notices and they switch to the database before their deadline.
	f.srv.Pause()
	defer f.srv.Resume()
	for i := range 3 {
		start := time.Now()
		if err := f.do(t, 4*time.Second); err != nil {
			t.Fatalf("Redis paused, call %d: Do = %v", i, err)
		}
		if f.lastMode() != guard.ModeDatabase {
			t.Fatalf("Redis paused, call %d: mode %v", i, f.lastMode())
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("Redis paused, call %d took %v", i, d)
		}
	}
	f.srv.Resume()
	f.mu.Lock()
	total := len(f.results)
	f.mu.Unlock()
	if n := f.counter(1); n != total {
		t.Fatalf("counter %d after %d successful calls", n, total)
	}
}

// A Redis-mode holder and a database-mode holder of one key at once: the
// fence row serialises them. The database-mode claim waits for the Redis-mode
// transaction, mints a larger token, and reads its write; a Redis token
// below a minted one is fenced and the floor raised, as after a failover.
func TestFallbackAndRedisHoldersAreSerialised(t *testing.T) {
	f := newFBEnv(t, guard.Options{FallbackAfter: 1})
	f.srv.Kill() // f.g runs in database mode; f.env.g keeps Redis mode
	ctx := context.Background()

	var redisToken, dbToken uint64
	var dbSaw atomic.Int64
	dbDone := make(chan error, 1)
	err := f.env.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		redisToken = tx.Token()
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		go func() {
			dbDone <- f.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
				dbToken = tx.Token()
				var n int
				if err := tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = 1"); err != nil {
					return err
				}
				dbSaw.Store(int64(n))
				return increment(ctx, tx, 1)
			})
		}()
		waitFor(t, "the database-mode claim to wait for the fence row", func() bool {
			return f.running("UPDATE "+fence.Table) == 1
		})
		return nil
	})
	must(t, err)
	must(t, <-dbDone)
	if f.lastMode() != guard.ModeDatabase {
		t.Fatalf("second holder mode %v", f.lastMode())
	}
	if dbSaw.Load() != 1 || dbToken <= redisToken || f.counter(1) != 2 {
		t.Fatalf("database holder saw %d (want 1), tokens redis %d db %d, counter %d", dbSaw.Load(), redisToken, dbToken, f.counter(1))
	}

	// A minted token far ahead of Redis's clock: the next Redis-mode holder
	// is fenced once, raises the floor and commits under a new token in the
	// same Do.
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	testenv.MustExec(t, f.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", future, f.env.g.FenceResource("k"))
	must(t, f.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if tx.Token() != future+1 {
			t.Errorf("minted %d, want %d", tx.Token(), future+1)
		}
		return nil
	}))
	fenced, retried := 0, 0
	rg := guard.New(f.env.locker, f.db, &guard.Options{Hooks: guard.Hooks{
		OnFenced: func(string, uint64, uint64) { fenced++ },
		OnRetry:  func(string, int, error) { retried++ },
	}})
	must(t, rg.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if tx.Token() <= future+1 {
			t.Errorf("token after the floor was raised: %d", tx.Token())
		}
		return nil
	}))
	if fenced != 1 || retried != 1 {
		t.Fatalf("Redis-mode holder below the minted token: fenced %d times, retried %d, want 1 and 1", fenced, retried)
	}
}

// Database-mode callers beyond the caps wait without a connection, and give
// up with ErrFallbackLimit when their ctx ends, touching nothing.
func TestFallbackCapsDatabaseWaiters(t *testing.T) {
	f := newFBEnv(t, guard.Options{FallbackAfter: 1, FallbackMaxWaiters: 1})
	f.srv.Kill()
	ctx := context.Background()
	inside := make(chan struct{})
	release := make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- f.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			close(inside)
			<-release
			return increment(ctx, tx, 1)
		})
	}()
	<-inside
	inUse := f.db.Stats().InUse
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := f.g.Do(short, "other", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
	if !errors.Is(err, guard.ErrFallbackLimit) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller over the cap: Do = %v, want ErrFallbackLimit", err)
	}
	if now := f.db.Stats().InUse; now > inUse {
		t.Fatalf("connections in use went from %d to %d while the caller waited for a slot", inUse, now)
	}
	close(release)
	must(t, <-holder)
	if a, b := f.counter(1), f.counter(2); a != 1 || b != 0 {
		t.Fatalf("counters %d, %d; want 1, 0", a, b)
	}
}

func TestFallbackOptionsThatCannotWork(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.db.SetMaxOpenConns(4)
	t.Cleanup(func() { e.db.SetMaxOpenConns(0) })
	for _, c := range []struct {
		opt   guard.Options
		field string
	}{
		{guard.Options{Fallback: guard.FallbackDatabase, FallbackMaxWaiters: 5}, "FallbackMaxWaiters"},
		{guard.Options{Fallback: guard.FallbackDatabase, FallbackAfter: -1}, "FallbackAfter"},
		{guard.Options{Fallback: guard.Fallback(7)}, "Fallback"},
		{guard.Options{Fallback: guard.FallbackDatabase, FallbackRetry: -time.Second}, "FallbackRetry"},
	} {
		g := guard.New(e.locker, e.db, &c.opt)
		err := g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
		if !errors.Is(err, guard.ErrInvalidOptions) || !strings.Contains(err.Error(), "Options."+c.field) {
			t.Errorf("%+v: Do = %v, want ErrInvalidOptions naming %s", c.opt, err, c.field)
		}
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter %d: invalid options touched the database", n)
	}
}

// In database mode every acquisition ends with an unlock step too, so that
// hooks counting locks held, and the hold time in Result, see it end.
func TestFallbackReportsTheEndOfEachHold(t *testing.T) {
	f := newFBEnv(t, guard.Options{FallbackAfter: 1})
	var mu sync.Mutex
	var kinds []guard.StepKind
	f.g = guard.New(f.locker, f.db, &guard.Options{
		Fallback: guard.FallbackDatabase, FallbackAfter: 1, Namespace: f.prefix,
		Hooks: guard.Hooks{
			OnStep: func(_ context.Context, s guard.Step) {
				mu.Lock()
				kinds = append(kinds, s.Kind)
				mu.Unlock()
			},
			OnDone: func(_ context.Context, r guard.Result) {
				f.mu.Lock()
				f.results = append(f.results, r)
				f.mu.Unlock()
			},
		},
	})
	f.srv.Kill()
	for range 3 {
		if err := f.do(t, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r := f.results[len(f.results)-1]
	if r.Mode != guard.ModeDatabase || r.Held <= 0 {
		t.Fatalf("last result: mode %v, held %v; want database mode and a hold time", r.Mode, r.Held)
	}
	mu.Lock()
	defer mu.Unlock()
	locks, unlocks := 0, 0
	for _, k := range kinds {
		switch k {
		case guard.StepLock:
			locks++
		case guard.StepUnlock:
			unlocks++
		}
	}
	if locks != 3 || unlocks != 3 {
		t.Fatalf("steps %v: %d lock and %d unlock steps, want 3 of each", kinds, locks, unlocks)
	}
}

// In database mode the claim mints the token (fence.ClaimNextExisting) and,
// as with a lock, creates no fence row: a key's first Do makes the row
// outside the transaction and claims again, in the same attempt.
func TestFallbackFirstDoMakesFenceRow(t *testing.T) {
	var retries atomic.Int32
	var log queryLog
	f := newFBEnvDial(t, guard.Options{FallbackAfter: 1, FallbackRetry: time.Minute,
		Hooks: guard.Hooks{OnRetry: func(string, int, error) { retries.Add(1) }}}, log.wrap)
	f.srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, key := range []string{"first", "first", "second"} {
		log.reset()
		var attempt int
		var token uint64
		err := f.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			attempt, token = tx.Attempt(), tx.Token()
			return increment(ctx, tx, 1)
		})
		if err != nil {
			t.Fatalf("Do %d on %q: %v", i, key, err)
		}
		if f.lastMode() != guard.ModeDatabase {
			t.Fatalf("Do %d: mode %v, want database", i, f.lastMode())
		}
		if attempt != 1 {
			t.Fatalf("Do %d: fn ran as attempt %d, want 1", i, attempt)
		}
		if fr, err := f.fence(key); err != nil || fr.Token != token {
			t.Fatalf("Do %d: fence row of %q %+v, %v; want token %d", i, key, fr, err, token)
		}
		// The first Do on a key: a claim that finds no row, the row made,
		// the claim again. Later ones: one claim, nothing read before.
		wantClaims, wantReads := 1, 0
		if i != 1 {
			wantClaims, wantReads = 2, 1
		}
		if c, n := log.count("UPDATE "+fence.Table), log.count("SELECT 1 FROM "+fence.Table); c != wantClaims || n != wantReads {
			t.Fatalf("Do %d on %q: %d claims and %d existence reads, want %d and %d", i, key, c, n, wantClaims, wantReads)
		}
	}
	if n := retries.Load(); n != 0 {
		t.Fatalf("%d retries, want none", n)
	}
	if got := f.counter(1); got != 3 {
		t.Fatalf("counter %d, want 3", got)
	}
}
