package redislock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// BenchmarkLockUnlock measures an uncontended Lock+Unlock next to a PING of
// the same client, interleaved, and reports both medians and their ratio.
// bench/lockbench measures hand-off and contention as well.
func BenchmarkLockUnlock(b *testing.B) {
	benchLockUnlock(b, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} })
}

// BenchmarkLockUnlockDeadline is BenchmarkLockUnlock with a ctx that can end,
// as request handlers have: every request then runs on a goroutine of its own
// so that the call can return when ctx ends.
func BenchmarkLockUnlockDeadline(b *testing.B) {
	benchLockUnlock(b, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	})
}

func benchLockUnlock(b *testing.B, newCtx func() (context.Context, context.CancelFunc)) {
	rdb := testenv.Redis(b)
	l := newTestLocker(b, rdb, nil)
	pings := make([]time.Duration, 0, b.N)
	locks := make([]time.Duration, 0, b.N)
	for b.Loop() {
		ctx, cancel := newCtx()
		t0 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		lk, err := l.Lock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		pings, locks = append(pings, t1.Sub(t0)), append(locks, time.Since(t1))
		cancel()
	}
	slices.Sort(pings)
	slices.Sort(locks)
	ping, lock := pings[len(pings)/2], locks[len(locks)/2]
	b.ReportMetric(float64(ping.Nanoseconds()), "ping-p50-ns")
	b.ReportMetric(float64(lock.Nanoseconds()), "lock+unlock-p50-ns")
	b.ReportMetric(float64(lock)/float64(ping), "x-ping-p50")
}

// BenchmarkHandOffScripts measures the server time of the two scripts of a
// busy lock's turn, with 127 waiters queued: unlock.lua handing the lock to
// the head of the queue, and acquire.lua queueing the releaser again at the
// back. The times come from INFO commandstats (EVALSHA usec, read around each
// call), so they count the script and the commands it calls, not the
// network; run it against an otherwise idle Redis.
func BenchmarkHandOffScripts(b *testing.B) {
	const queued = 128
	ctx := context.Background()
	rdb := testenv.Redis(b)
	k := keysFor(testenv.Prefix(b), "turns")
	b.Cleanup(func() { rdb.Del(context.Background(), k.all()...) })
	evalshaUsec := func() float64 {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for field := range strings.SplitSeq(rest, ",") {
					if v, ok := strings.CutPrefix(field, "usec="); ok {
						n, _ := strconv.ParseFloat(v, 64)
						return n
					}
				}
			}
		}
		return 0
	}
	// Four Lockers' ids, as in a busy service; every acquisition its own owner.
	id := func(i, n int) string { return fmt.Sprintf("bench%d.%d-%d", i%4, i, n) }
	enqueue := func(id string) {
		err := scriptAcquire.Run(ctx, rdb, k.all(), id, id, 30000, 600000, 10000, 30000, argFirst, "PUBLISH").Err()
		if err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]string, queued)
	for i := range ids {
		ids[i] = id(i, 0)
		enqueue(ids[i]) // the first holds the lock, the others queue
	}
	var unlockUsec, acquireUsec float64
	turn := 0
	for b.Loop() {
		h := turn % queued
		turn++
		u0 := evalshaUsec()
		res, err := scriptUnlock.Run(ctx, rdb, k.all(), ids[h], 600000, "PUBLISH", 30000, "other").Int64()
		if err != nil || res != 1 {
			b.Fatalf("unlock: %v, %v", res, err)
		}
		u1 := evalshaUsec()
		ids[h] = id(h, turn)
		enqueue(ids[h])
		u2 := evalshaUsec()
		unlockUsec += u1 - u0
		acquireUsec += u2 - u1
	}
	if n := rdb.ZCard(ctx, k.q).Val(); n != queued-1 {
		b.Fatalf("%d queued at the end, want %d", n, queued-1)
	}
	b.ReportMetric(unlockUsec/float64(turn), "unlock-server-µs")
	b.ReportMetric(acquireUsec/float64(turn), "enqueue-server-µs")
}
