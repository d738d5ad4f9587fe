package guard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// Callers that give up while their claim waits for the fence row must not
// leave the claim waiting on the server. The driver closes the socket of a
// statement whose ctx ended, but a server thread waiting for a row lock does
// not notice: without a KILL it would keep the lock's queue place and a
// connection slot for innodb_lock_wait_timeout, each such caller adding
// one beyond the pool's limit.
func TestCancelledClaimsDoNotWaitOnTheServer(t *testing.T) {
	for _, name := range []string{"defaults", "handoff-at-end"} {
		t.Run(name, func(t *testing.T) {
			opt := guard.Options{}
			if name == "handoff-at-end" {
				opt = *atEnd(opt)
			}
			testCancelledClaims(t, opt)
		})
	}
}

func testCancelledClaims(t *testing.T, opt guard.Options) {
	e := newEnv(t, envConfig{guard: &opt})
	e.db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, e.g.Do(ctx, "slow", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row

	// The holder's transaction keeps the fence row until release closes.
	// (With HandOffAtEnd the lock itself keeps the others out; the claims
	// that wait then are those of callers granted the lock after a loss.
	// Either way, a claim that waits when its caller gives up must end.)
	release := make(chan struct{})
	claimed := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- e.g.Do(ctx, "slow", func(ctx context.Context, tx *guard.Tx) error {
			close(claimed)
			<-release
			return increment(ctx, tx, 1)
		})
	}()
	<-claimed
	if opt.HandOff == guard.HandOffAtEnd {
		// Take the lock away so that the next callers are granted it and
		// their claims wait for the holder's row lock.
		must(t, e.rdb.Del(ctx, e.names("slow").Lock).Err())
	}

	const callers = 6
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer ccancel()
			errs <- e.g.Do(cctx, "slow", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("caller: %v, want context.DeadlineExceeded", err)
		}
	}
	// Every caller has returned; none of their claims may still wait. A
	// claim the server had when its caller gave up was ended before Do
	// returned; one whose packet the server read only after that (a caller
	// granted the lock in its last moments) is found by the searches that
	// go on for about 150ms. Without them it would wait until the holder
	// ends, 30s away.
	for deadline := time.Now().Add(time.Second); ; {
		n := e.running("UPDATE " + "redfence_fences")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d claims still waiting on the server 1s after their callers gave up, want 0", n)
			break
		}
		time.Sleep(10 * time.Millisecond) // the server's state: nothing to wait on
	}
	close(release)
	if err := <-held; err != nil && opt.HandOff != guard.HandOffAtEnd {
		t.Fatalf("holder: %v", err)
	}
	if n := e.counter(2); n != 0 {
		t.Fatalf("counter 2 = %d, want 0: a caller that gave up ran fn", n)
	}
}
