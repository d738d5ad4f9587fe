package redislock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/redislock"
)

// The examples connect to REDIS_ADDR, or to a local Redis on 127.0.0.1:6379,
// and give their Locker a prefix of the run's own so that they never meet
// another program's locks. In an application the prefix is a fixed name, or
// left to its default. A lock still held when its Locker closes is released
// by Close.

func ExampleLocker_Lock() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		fmt.Println("Redis does not answer (set REDIS_ADDR=host:port):", err)
		return
	}
	locker := redislock.New(rdb, &redislock.Options{
		Prefix:   "example-" + rand.Text(),
		TokenTTL: time.Minute, // a demo: let its token key go soon
	})
	defer locker.Close()

	lock, err := locker.Lock(ctx, "inventory:sku-42")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}

	// Work under the lock; stop when it is lost. Give lock.Token() to the
	// resource so it can refuse writes from holders that lost the lock.
	select {
	case <-lock.Done():
		fmt.Println("lost:", lock.Err())
	default:
		fmt.Println("holding", lock.Key(), "with a token:", lock.Token() > 0)
	}
	// ErrNotHeld here means the lease ran out before the work was done.
	if err := lock.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output: holding inventory:sku-42 with a token: true
}

// TryLock never queues: a caller that finds the lock taken gets
// ErrNotAcquired at once and can do something else.
func ExampleLocker_TryLock() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		fmt.Println("Redis does not answer (set REDIS_ADDR=host:port):", err)
		return
	}
	locker := redislock.New(rdb, &redislock.Options{Prefix: "example-" + rand.Text(), TokenTTL: time.Minute})
	defer locker.Close()

	first, err := locker.TryLock(ctx, "report:daily")
	if err != nil {
		fmt.Println("first caller:", err)
		return
	}
	fmt.Println("first caller: acquired")

	_, err = locker.TryLock(ctx, "report:daily")
	switch {
	case errors.Is(err, redislock.ErrNotAcquired) && ctx.Err() == nil:
		fmt.Println("second caller: busy, try later")
	case err != nil:
		fmt.Println("second caller:", err)
	default:
		fmt.Println("second caller: acquired a lock that was held")
	}
	if err := first.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output:
	// first caller: acquired
	// second caller: busy, try later
}

// An owner that already holds a lock takes it again at once, with the same
// token; anybody else is refused.
func ExampleWithOwner() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		fmt.Println("Redis does not answer (set REDIS_ADDR=host:port):", err)
		return
	}
	locker := redislock.New(rdb, &redislock.Options{Prefix: "example-" + rand.Text(), TokenTTL: time.Minute})
	defer locker.Close()

	outer, err := locker.Lock(ctx, "report", redislock.WithOwner("job-7"))
	if err != nil {
		fmt.Println("outer:", err)
		return
	}
	inner, err := locker.TryLock(ctx, "report", redislock.WithOwner("job-7")) // reentrant
	if err != nil {
		fmt.Println("inner:", err)
		return
	}
	_, err = locker.TryLock(ctx, "report") // someone else
	fmt.Println("same token:", inner.Token() == outer.Token())
	fmt.Println("someone else:", err)
	// The lock is free once every acquisition of the owner is released.
	if err := errors.Join(inner.Unlock(ctx), outer.Unlock(ctx)); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output:
	// same token: true
	// someone else: redislock: not acquired
}

// When the resource protected by the lock has seen a token higher than Redis
// now mints (a failover to a Redis server whose clock is behind), feed it
// back: every later token of the key is above it.
func ExampleLocker_RaiseTokenFloor() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		fmt.Println("Redis does not answer (set REDIS_ADDR=host:port):", err)
		return
	}
	locker := redislock.New(rdb, &redislock.Options{Prefix: "example-" + rand.Text(), TokenTTL: time.Minute})
	defer locker.Close()

	lock, err := locker.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := lock.Unlock(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// The database says it accepted a token an hour (in µs) above ours.
	seen := lock.Token() + uint64(time.Hour/time.Microsecond)
	if err := locker.RaiseTokenFloor(ctx, "invoice:7", seen); err != nil {
		fmt.Println(err)
		return
	}
	next, err := locker.Lock(ctx, "invoice:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next token above what the database saw:", next.Token() > seen)
	if err := next.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output: next token above what the database saw: true
}

// KeyNamesFor tells tools outside the Locker (redis-cli, monitoring, a
// clean-up job) where a lock's state lives; it needs no server.
func ExampleKeyNamesFor() {
	names, err := redislock.KeyNamesFor("orders", "sku:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(names.Lock)
	fmt.Println(names.Token)
	fmt.Println(names.Queue)
	fmt.Println(names.Waiters)
	fmt.Println(names.Channel)
	// Output:
	// orders:{sku:42}:lock
	// orders:{sku:42}:token
	// orders:{sku:42}:q
	// orders:{sku:42}:w
	// orders:{sku:42}:ch
}

// With Redis down, every example that needs it fails with its own message
// naming REDIS_ADDR, rather than aborting the test binary.
func TestExamplesFailCleanlyWhenRedisIsDown(t *testing.T) {
	const down = "127.0.0.1:1" // nothing listens on port 1
	cmd := exec.Command(os.Args[0], "-test.run=^Example", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+down)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if e, ok := err.(*exec.ExitError); !ok || e.ExitCode() != 1 {
		t.Fatalf("examples with Redis down: %v, want exit status 1\n%s", err, text)
	}
	for _, crash := range []string{"panic:", "goroutine ", "unexpected goroutines"} {
		if strings.Contains(text, crash) {
			t.Fatalf("examples with Redis down crashed or leaked (%q)\n%s", crash, text)
		}
	}
	const needRedis = 4 // every example but ExampleKeyNamesFor
	if n := strings.Count(text, "--- FAIL: Example"); n != needRedis {
		t.Errorf("%d examples failed, want %d\n%s", n, needRedis, text)
	}
	if n := strings.Count(text, "got:\nRedis does not answer (set REDIS_ADDR="); n != needRedis {
		t.Errorf("%d examples said Redis does not answer, want %d\n%s", n, needRedis, text)
	}
}
