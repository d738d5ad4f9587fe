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
	for _, c := range []struct {
		name string
		opt  guard.Options
	}{
		{"defaults", guard.Options{}},
		{"handoff-at-end", *atEnd(guard.Options{})},
		// The claim rides with fn's first statement, on fn's ctx.
		{"ride", guard.Options{ClaimWithFirstStatement: true}},
	} {
		t.Run(c.name, func(t *testing.T) { testCancelledClaims(t, c.opt) })
	}
}

func testCancelledClaims(t *testing.T, opt guard.Options) {
	e := newEnv(t, envConfig{guard: &opt})
	e.db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, e.g.Do(ctx, "slow", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row

	// The holder's transaction keeps the fence row until release closes.
	// (With HandOffAtEnd, or a claim that rides, the lock itself keeps the
	// others out; the claims that wait then are those of callers granted
	// the lock after a loss. Either way, a claim that waits when its caller
	// gives up must end.)
	release := make(chan struct{})
	claimed := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- e.g.Do(ctx, "slow", func(ctx context.Context, tx *guard.Tx) error {
			if err := increment(ctx, tx, 1); err != nil { // a ride's claim holds once it returned
				return err
			}
			close(claimed)
			<-release
			return nil
		})
	}()
	<-claimed
	lockKept := opt.HandOff == guard.HandOffAtEnd || opt.ClaimWithFirstStatement
	if lockKept {
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
	for deadline := time.Now().Add(500 * time.Millisecond); ; {
		n := e.claimsRunning()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d claims still waiting on the server 500ms after their callers gave up, want 0", n)
			break
		}
		time.Sleep(10 * time.Millisecond) // the server's state: nothing to wait on
	}
	close(release)
	if err := <-held; err != nil && !lockKept {
		t.Fatalf("holder: %v", err)
	}
	if n := e.counter(2); n != 0 {
		t.Fatalf("counter 2 = %d, want 0: a caller that gave up ran fn", n)
	}
}

// claimsRunning counts the claims running on the server, in any of the
// forms a claim is sent in: the fence table's UPDATE, or the procedure call
// or compound statement around it, which show when the server shows the
// outer statement.
func (e *env) claimsRunning() int {
	var n int
	if err := e.db.Get(&n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST"+
		" WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND IN ('Query', 'Execute')"+
		" AND (INFO LIKE 'UPDATE redfence_fences%' OR INFO LIKE 'CALL redfence_begin_claim(%'"+
		" OR INFO LIKE 'BEGIN NOT ATOMIC %redfence_begin_claim(%')"); err != nil {
		e.t.Fatal(err)
	}
	return n
}
