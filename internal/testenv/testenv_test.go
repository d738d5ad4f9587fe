package testenv

import (
	"context"
	"testing"
)

func TestRedisPrefixIsCleanedUp(t *testing.T) {
	rdb := Redis(t)
	ctx := context.Background()
	var key string
	t.Run("writer", func(t *testing.T) {
		key = Prefix(t) + "k"
		if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("key %s left behind after subtest: n=%d err=%v", key, n, err)
	}
}

func TestMySQLDatabaseIsPrivate(t *testing.T) {
	db := MySQL(t)
	var name string
	if err := db.Get(&name, "SELECT DATABASE()"); err != nil {
		t.Fatal(err)
	}
	if len(name) < len("rftest_") || name[:7] != "rftest_" {
		t.Fatalf("database %q is not a private test database", name)
	}
}

func TestRedisServerRestartKeepsPortAndLosesData(t *testing.T) {
	s := RedisServer(t)
	rdb := s.Client()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	port := s.Port
	s.Restart()
	if s.Port != port {
		t.Fatalf("restart moved the server from port %d to %d", port, s.Port)
	}
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart without persistence: exists=%d err=%v", n, err)
	}
}
