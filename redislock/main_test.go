package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTestLocker returns a Locker on rdb whose keys live under the test's own
// prefix (unless opt names one), closed when the test ends.
func newTestLocker(t testing.TB, rdb redis.UniversalClient, opt *Options) *Locker {
	t.Helper()
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Prefix == "" {
		o.Prefix = testenv.Prefix(t)
	}
	l := New(rdb, &o)
	if l.err != nil {
		t.Fatalf("New: %v", l.err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// testCtx is a context that ends with the test, bounded so that a hang fails
// instead of blocking the suite.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustLock(t testing.TB, l *Locker, key string, opts ...LockOption) *Lock {
	t.Helper()
	lk, err := l.Lock(testCtx(t), key, opts...)
	if err != nil {
		t.Fatalf("Lock(%q): %v", key, err)
	}
	return lk
}

// mustUnlock reports an Unlock error without stopping the test, so it may be
// used from any goroutine.
func mustUnlock(t testing.TB, lk *Lock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lk.Unlock(ctx); err != nil {
		t.Errorf("Unlock(%q): %v", lk.Key(), err)
	}
}

// passHooks passes dials and pipelines through untouched: the client hooks
// of the tests embed it and look at single commands only.
type passHooks struct{}

func (passHooks) DialHook(next redis.DialHook) redis.DialHook { return next }
func (passHooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// queue returns the waiter ids queued for key, in order.
func queue(t testing.TB, rdb redis.UniversalClient, l *Locker, key string) []string {
	t.Helper()
	ids, err := rdb.ZRange(context.Background(), l.keys(key).q, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitFor polls cond every few milliseconds until it holds or d passes. It is
// for observing Redis state written by another goroutine, where no signal
// exists.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
