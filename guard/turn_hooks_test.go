package guard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// A batched Do returns by the time its ctx ends although the ROLLBACK that
// releases its committed transaction does not answer.
func TestABatchedDoReturnsWhenTheReleaseHangs(t *testing.T) {
	for _, opt := range []guard.Options{{Batch: guard.BatchOptions{Max: 2}}, {Batch: guard.BatchOptions{Max: 2}, Succession: guard.SuccessionOptions{NoRelay: true}}} {
		t.Run(map[bool]string{false: "relaying", true: "no-relay"}[opt.Succession.NoRelay], func(t *testing.T) {
			gate := &gatedRollback{}
			defer gate.release()
			e := newEnv(t, envConfig{dial: gate.wrap, guard: &opt})
			bg, cancelBg := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelBg()
			must(t, e.g.Do(bg, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
			waitFor(t, "pool idle", func() bool { return e.db.Stats().InUse == 0 })

			gate.arm()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
			}()
			select {
			case err := <-done:
				t.Logf("Do = %v", err)
			case <-time.After(4 * time.Second):
				t.Error("batched Do still blocked 3s after its ctx ended: its leave waits for the runner's awaitRelease(b.ctx), which nothing cancels once delivered")
				gate.release()
				<-done
			}
		})
	}
}

// With HandOffAtEnd, a batch whose release does not answer does not keep
// the key's next batch from running.
func TestAHungReleaseDoesNotStallTheNextBatch(t *testing.T) {
	gate := &gatedRollback{}
	defer gate.release()
	e := newEnv(t, envConfig{dial: gate.wrap, guard: atEnd(guard.Options{Batch: guard.BatchOptions{Max: 2}})})
	bg, cancelBg := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelBg()
	must(t, e.g.Do(bg, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	waitFor(t, "pool idle", func() bool { return e.db.Stats().InUse == 0 })
	gate.arm()
	held := gate.held
	ctx1, cancel1 := context.WithTimeout(context.Background(), time.Second)
	defer cancel1()
	go func() {
		_ = e.g.Do(ctx1, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
	}()
	<-held
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	go func() {
		done <- e.g.Do(ctx2, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("second batch: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("second batch's Do blocked past its ctx")
		gate.release()
		<-done
	}
}

// OnAcquired is called before the lock is watched, so that OnLost of the
// same turn comes after it.
func TestOnAcquiredComesBeforeOnLost(t *testing.T) {
	var mu sync.Mutex
	var order []string
	var e *env
	e = newEnv(t, envConfig{
		lock: &redislock.Options{LeaseTTL: 300 * time.Millisecond},
		guard: atEnd(guard.Options{Hooks: guard.Hooks{
			OnAcquired: func(key string, token uint64, _ time.Duration) {
				// The lease ends behind the holder's back while the hook runs.
				must(t, e.rdb.Del(context.Background(), e.names("k").Lock).Err())
				time.Sleep(time.Second)
				mu.Lock()
				order = append(order, "acquired")
				mu.Unlock()
			},
			OnLost: func(string, uint64) {
				mu.Lock()
				order = append(order, "lost")
				mu.Unlock()
			},
		}}),
	})
	_ = e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return nil })
	mu.Lock()
	defer mu.Unlock()
	if len(order) == 0 || order[0] != "acquired" {
		t.Errorf("hook order %v, want OnAcquired first", order)
	}
}
