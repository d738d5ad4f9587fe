package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// Two Guards sharing one Locker exclude each other through its lock, each
// fencing in its own database (a key whose work spans two databases, or
// two Guards over one Locker with different Namespaces). With
// HandOffAtClaim the lock is handed on at the claim, and the next holder's
// claim, on another fence row, does not wait: both fns run at once, with
// both transactions alive, and both commit.
func TestReviewHandOffSharedLockerOtherFenceRow(t *testing.T) {
	e1 := newEnv(t, envConfig{})
	e2 := newEnv(t, envConfig{})
	opt := &guard.Options{HandOffAtClaim: true}
	g1 := guard.New(e1.locker, e1.db, opt)
	g2 := guard.New(e1.locker, e2.db, opt) // same Locker, so the same lock for "k"
	ctx := context.Background()
	inA, releaseA := make(chan struct{}), make(chan struct{})
	a := make(chan error, 1)
	go func() {
		a <- g1.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			close(inA)
			<-releaseA
			return increment(ctx, tx, 1)
		})
	}()
	<-inA
	bRan := make(chan struct{})
	b := make(chan error, 1)
	go func() {
		b <- g2.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			close(bRan)
			return increment(ctx, tx, 1)
		})
	}()
	overlapped := false
	select {
	case <-bRan:
		overlapped = true
	case <-time.After(time.Second):
	}
	close(releaseA)
	must(t, <-a)
	must(t, <-b)
	if overlapped {
		t.Fatal("the second holder's fn ran while the first holder's fn ran; both committed")
	}
}
