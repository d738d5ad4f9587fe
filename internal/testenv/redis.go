package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisAddr is used when REDIS_ADDR is unset.
const DefaultRedisAddr = "127.0.0.1:6379"

// RedisAddr returns the address tests use for the shared Redis server:
// REDIS_ADDR when set; otherwise DefaultRedisAddr when something answers
// there; otherwise, when a Docker engine is reachable, a Redis container
// started once for the whole test process with testcontainers-go.
func RedisAddr() string {
	quietClientLogs()
	return redisResolver.get()
}

// Redis returns a client for the shared Redis server, closed when the test
// ends. It fails the test at once, naming REDIS_ADDR, when the server does not
// answer a PING within a few seconds. The server is checked once per test
// process: when it is down, the first test explains and the later ones fail
// without waiting.
//
// The shared server is used by packages running in parallel: never FLUSHALL,
// FLUSHDB, CONFIG SET or SHUTDOWN it. Tests that need destructive commands
// start their own server with [RedisServer].
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	addr := RedisAddr()
	if r := reachRedis(addr); r.err != nil {
		r.fail(t, redisDown(addr, r.err))
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(redisDown(addr, err))
	}
	return rdb
}

// redisDown is the one-line failure of a test whose Redis does not answer.
func redisDown(addr string, err error) string {
	return fmt.Sprintf("testenv: Redis at %s does not answer (%v): start it, or set REDIS_ADDR=host:port "+
		"(docker compose up -d starts one on 127.0.0.1:6379)%s", addr, err, noteSuffix(redisResolver))
}

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Prefix returns a key prefix unique to this test run, such as
// "rftest:TestLockFIFO:3f9a1c2e:". Every key the test writes should start with
// it; when the test ends all keys under it are deleted from the shared server.
func Prefix(t testing.TB) string {
	t.Helper()
	p := "rftest:" + unsafeKeyChars.ReplaceAllString(t.Name(), "_") + ":" + RandomHex(4)
	t.Cleanup(func() { deleteKeys(p + "*") })
	return p
}

func deleteKeys(pattern string) {
	addr := RedisAddr()
	if reachRedis(addr).err != nil {
		return // nothing was written
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		_ = rdb.Unlink(ctx, keys[:n]...).Err()
		keys = keys[n:]
	}
}

// RandomHex returns 2n random hex characters.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("testenv: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}
