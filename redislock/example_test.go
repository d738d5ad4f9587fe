package redislock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

func ExampleLocker_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	defer rdb.Close()
	locker := redislock.New(rdb, &redislock.Options{
		Prefix:   "example:" + testenv.RandomHex(4),
		TokenTTL: time.Minute, // a demo: let its token key go soon
	})
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := locker.Lock(ctx, "inventory:sku-42")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Unlock(context.Background())

	// Work under the lock; stop when it is lost. Give lock.Token() to the
	// resource so it can refuse writes from holders that lost the lock.
	select {
	case <-lock.Done():
		fmt.Println("lost:", lock.Err())
	default:
		fmt.Println("holding", lock.Key(), "with a token:", lock.Token() > 0)
	}
	// Output: holding inventory:sku-42 with a token: true
}

func ExampleWithOwner() {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	defer rdb.Close()
	locker := redislock.New(rdb, &redislock.Options{
		Prefix:   "example:" + testenv.RandomHex(4),
		TokenTTL: time.Minute, // a demo: let its token key go soon
	})
	defer locker.Close()
	ctx := context.Background()

	outer, _ := locker.Lock(ctx, "report", redislock.WithOwner("job-7"))
	inner, _ := locker.TryLock(ctx, "report", redislock.WithOwner("job-7")) // reentrant
	_, err := locker.TryLock(ctx, "report")                                 // someone else
	fmt.Println(inner.Token() == outer.Token(), err)
	_ = inner.Unlock(ctx)
	_ = outer.Unlock(ctx)
	// Output: true redislock: not acquired
}
