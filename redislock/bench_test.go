package redislock

import (
	"context"
	"slices"
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
