package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// As TestFallbackMixedModesAlternating, for a Redis-mode Guard that batches
// its callers: a batch fenced by a token minted in database mode raises the
// floor and runs again under a new turn, within the same Do.
func TestFallbackMixedModesAlternatingBatched(t *testing.T) {
	m := newMixedEnv(t)
	m.redis = guard.New(m.env.locker, m.db, &guard.Options{Namespace: m.prefix, MaxBatch: 4, Hooks: guard.Hooks{
		OnFenced: func(string, uint64, uint64) { m.fenced.Add(1) },
	}})
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	m.setToken(t, "k", future)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rounds = 4
	for i := range rounds {
		var dbToken, redisToken uint64
		must(t, m.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			dbToken = tx.Token()
			return increment(ctx, tx, 1)
		}))
		err := m.redis.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			redisToken = tx.Token()
			return increment(ctx, tx, 1)
		})
		if err != nil {
			t.Fatalf("round %d: batched Redis-mode Do after a database-minted token %d: %v (fenced %d times so far)", i, dbToken, err, m.fenced.Load())
		}
		if redisToken <= dbToken {
			t.Fatalf("round %d: Redis-mode token %d not above the minted %d", i, redisToken, dbToken)
		}
	}
	if n := m.counter(1); n != 1+2*rounds {
		t.Fatalf("counter %d, want %d", n, 1+2*rounds)
	}
}
