package galeratest

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// With HandOffAtClaim the fence row's lock is what keeps the next holder
// out once the Redis lock is handed on. On Galera that lock is local to the
// node the transaction runs on: a next holder on another node claims at
// once, and its fn runs while the first holder's fn runs, both
// transactions alive (certification then aborts one of them at commit).
func TestReviewHandOffAcrossNodes(t *testing.T) {
	w := newWorld(t, 60*time.Second)
	const key = "handoff:1"
	a := w.instance("a", 0, instanceConfig{guard: guard.Options{HandOffAtClaim: true}})
	b := w.instance("b", 2, instanceConfig{guard: guard.Options{HandOffAtClaim: true}})
	inA, releaseA := make(chan struct{}), make(chan struct{})
	resA := make(chan error, 1)
	go func() {
		first := true
		resA <- a.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			if first {
				first = false
				close(inA)
				<-releaseA
			}
			return increment(ctx, tx, "a"+time.Now().String())
		})
	}()
	<-inA
	bRan := make(chan struct{})
	resB := make(chan error, 1)
	go func() {
		once := false
		resB <- b.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			if !once {
				once = true
				close(bRan)
			}
			return increment(ctx, tx, "b"+time.Now().String())
		})
	}()
	overlapped := false
	select {
	case <-bRan:
		overlapped = true
	case <-time.After(2 * time.Second):
	}
	close(releaseA)
	errA, errB := <-resA, <-resB
	t.Logf("a: %v; b: %v; counters %v", errA, errB, w.counters())
	if overlapped {
		t.Fatal("the next holder's fn, on another node, ran while the first holder's fn ran with its transaction open")
	}
}
