package guard_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// mixedEnv is one key shared by two Guards on one database: f.g, forced
// into database mode (its Redis is killed), and redis, in Redis mode, which
// counts the times it was fenced and records the mode of its calls.
type mixedEnv struct {
	*fbEnv
	redis  *guard.Guard
	fenced atomic.Int64
	modes  sync.Map // guard.Mode of each Redis-guard call that ended
}

func newMixedEnv(t *testing.T) *mixedEnv {
	t.Helper()
	m := &mixedEnv{fbEnv: newFBEnv(t, guard.Options{FallbackAfter: 1, FallbackRetry: time.Minute})}
	m.redis = guard.New(m.env.locker, m.db, &guard.Options{Namespace: m.prefix, Hooks: guard.Hooks{
		OnFenced: func(string, uint64, uint64) { m.fenced.Add(1) },
		OnDone:   func(_ context.Context, r guard.Result) { m.modes.Store(r.Mode, true) },
	}})
	m.srv.Kill()
	return m
}

// setToken stores token in key's fence row, as a floor raised elsewhere
// would have left it.
func (m *mixedEnv) setToken(t *testing.T, key string, token uint64) {
	t.Helper()
	must(t, m.do(t, 5*time.Second)) // makes the row of "k" in database mode
	testenv.MustExec(t, m.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", token, m.g.FenceResource(key))
}

// A key whose tokens are above the clocks: database mode mints the stored
// token + 1, Redis the number after its floor, so each database-mode claim
// fences the next Redis-mode call. The fenced call raises the floor and
// runs again in the same Do, under a token above the minted one.
func TestFallbackMixedModesAlternating(t *testing.T) {
	m := newMixedEnv(t)
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	m.setToken(t, "k", future)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rounds = 6
	last := future
	for i := range rounds {
		var dbToken, redisToken uint64
		must(t, m.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			dbToken = tx.Token()
			return increment(ctx, tx, 1)
		}))
		if m.lastMode() != guard.ModeDatabase || dbToken != last+1 {
			t.Fatalf("round %d: database-mode Guard in mode %v minted %d, want %d", i, m.lastMode(), dbToken, last+1)
		}
		err := m.redis.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			redisToken = tx.Token()
			return increment(ctx, tx, 1)
		})
		if err != nil {
			t.Fatalf("round %d: Redis-mode Do after a database-minted token %d: %v (fenced %d times so far)", i, dbToken, err, m.fenced.Load())
		}
		if redisToken <= dbToken {
			t.Fatalf("round %d: Redis-mode token %d not above the minted %d", i, redisToken, dbToken)
		}
		last = redisToken
	}
	if _, ok := m.modes.Load(guard.ModeDatabase); ok {
		t.Fatal("the Redis-mode Guard ran a call in database mode")
	}
	if n := m.counter(1); n != 1+2*rounds {
		t.Fatalf("counter %d, want %d", n, 1+2*rounds)
	}
}

// The same with another process staying in database mode, claiming the key
// all the while: every Redis-mode call commits.
func TestFallbackMixedModesConcurrent(t *testing.T) {
	m := newMixedEnv(t)
	m.setToken(t, "k", uint64(time.Now().Add(time.Hour).UnixMicro()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var dbCalls atomic.Int64
	dbErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				dbErr <- nil
				return
			default:
			}
			if err := m.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }); err != nil {
				dbErr <- err
				return
			}
			dbCalls.Add(1)
		}
	}()
	const calls = 6
	failed := 0
	for i := range calls {
		if err := m.redis.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }); err != nil {
			failed++
			t.Errorf("Redis-mode call %d: %v", i, err)
		}
	}
	close(stop)
	must(t, <-dbErr)
	if failed > 0 {
		t.Fatalf("%d of %d Redis-mode calls failed beside a database-mode process (fenced %d times)", failed, calls, m.fenced.Load())
	}
	if dbCalls.Load() == 0 {
		t.Fatal("the database-mode process never claimed the key")
	}
	if got, want := m.counter(1), 1+calls+int(dbCalls.Load()); got != want {
		t.Fatalf("counter %d, want %d", got, want)
	}
}

// Tokens at and above 2^63, up to 2^64-1, are claimed in database mode as
// in Redis mode, and the two modes keep taking turns above them.
func TestFallbackTokensAboveInt64(t *testing.T) {
	m := newMixedEnv(t)
	m.setToken(t, "k", 1<<63+5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dbToken, redisToken uint64
	must(t, m.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		dbToken = tx.Token()
		return increment(ctx, tx, 1)
	}))
	if dbToken != 1<<63+6 {
		t.Fatalf("database mode minted %d, want %d", dbToken, uint64(1<<63+6))
	}
	must(t, m.redis.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		redisToken = tx.Token()
		return increment(ctx, tx, 1)
	}))
	if redisToken <= dbToken {
		t.Fatalf("Redis-mode token %d not above the minted %d", redisToken, dbToken)
	}

	// The last token: minted, then nothing is above it.
	testenv.MustExec(t, m.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", uint64(math.MaxUint64-1), m.g.FenceResource("k"))
	must(t, m.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		dbToken = tx.Token()
		return nil
	}))
	if dbToken != math.MaxUint64 {
		t.Fatalf("database mode minted %d, want 2^64-1", dbToken)
	}
	errFnRan := errors.New("fn ran above 2^64-1")
	err := m.g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return errFnRan })
	if err == nil || errors.Is(err, errFnRan) {
		t.Fatalf("database-mode Do above 2^64-1 = %v, want a refused claim", err)
	}
	if n := m.counter(1); n != 3 {
		t.Fatalf("counter %d, want 3", n)
	}
}
