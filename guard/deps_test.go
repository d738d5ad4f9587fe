package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// Redis does not answer: Do fails within the caller's deadline, fn is not
// called and nothing is written. The clients are go-redis defaults, which
// ignore ctx deadlines on the wire (ContextTimeoutEnabled off): Do's own
// deadline must hold all the same.
func TestRedisUnreachable(t *testing.T) {
	e := newEnv(t, envConfig{})
	paused := testenv.RedisServer(t)
	for _, c := range []struct {
		name string
		rdb  func() *redis.Client
	}{
		{"refused", func() *redis.Client {
			rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}},
		{"paused", func() *redis.Client {
			rdb := redis.NewClient(&redis.Options{Addr: paused.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			must(t, rdb.Ping(context.Background()).Err()) // connected before the pause
			paused.Pause()
			t.Cleanup(paused.Resume)
			return rdb
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			locker := redislock.New(c.rdb(), &redislock.Options{Prefix: e.prefix})
			defer func() {
				paused.Resume() // lets the Locker's abandoned call end quickly
				_ = locker.Close()
			}()
			g := guard.New(locker, e.db, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
				t.Error("fn called without a lock")
				return nil
			})
			if err == nil {
				t.Fatal("Do succeeded without Redis")
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("Do took %v with a 500ms deadline: %v", d, err)
			}
			if _, err := e.fence("k"); !errors.Is(err, fence.ErrNoFence) {
				t.Fatalf("fence row written without a lock: %v", err)
			}
		})
	}
	paused.Resume()
}

// MySQL does not answer: Do releases the lock and says what failed.
func TestMySQLUnreachable(t *testing.T) {
	e := newEnv(t, envConfig{})
	bad, err := sqlx.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/x?timeout=1s", testenv.FreePort(t)))
	must(t, err)
	defer bad.Close()
	g := guard.New(e.locker, bad, &guard.Options{BackoffMin: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		t.Error("fn called without a transaction")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Do = %v, want an error naming the refused connection", err)
	}
	e.assertFree("k")
}
