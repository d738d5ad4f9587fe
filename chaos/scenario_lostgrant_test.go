package chaos

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// lostGrant is the set-up shared by the lost-grant scenarios: an older
// holder whose lease is long (renewal every lease/3, so it does not learn of
// the loss within a round), a newer holder that is granted the lock once the
// grant is gone, and two buyers that load the item between rounds.
type lostGrant struct {
	e            *env
	rdb          *redis.Client
	older, newer *client
	// renewing is an older holder whose first renewal falls due within a
	// round, for learnsLoss.
	renewing *client
	load     []*client
}

// newLostGrant sets up a lost-grant scenario; atEnd runs every Guard with
// guard.HandOffAtEnd and no relaying instead of the defaults.
func newLostGrant(t *testing.T, name string, atEnd bool) *lostGrant {
	// Stock for every window of buying the scenarios run, at the rate of
	// the fastest client, so that no round finds it sold out.
	e := newEnv(t, name, 2000)
	srv := testenv.RedisServer(t)
	olderDB := e.open(e.dsn) // a pool of its own, so that killing its connection touches nobody else
	locks := fastLocks
	locks.atEnd = atEnd
	return &lostGrant{
		e:     e,
		rdb:   srv.Client(),
		older: e.newClient(srv.Client(), olderDB, lockOpts{lease: 30 * time.Second, waiter: time.Second, recheck: 250 * time.Millisecond, atEnd: atEnd}),
		newer: e.newClient(srv.Client(), e.db, locks),
		// Always holding the lock until its transaction ends: with the
		// lock handed on at the claim there is nothing left to lose inside fn.
		renewing: e.newClient(srv.Client(), e.db, lockOpts{lease: 3 * time.Second, waiter: time.Second, recheck: 250 * time.Millisecond, atEnd: true}),
		load:     []*client{e.newClient(srv.Client(), e.db, locks), e.newClient(srv.Client(), e.db, locks)},
	}
}

// learnsLoss runs one more round, in which the older holder must learn that
// it lost the lock: its grant vanishes while it is inside fn, a newer holder
// is granted the key and holds it in Redis while its claim waits for the
// older transaction's fence row, and then the older holder's first renewal
// (a second into its 3 s lease) falls due. That renewal must report the loss
// (guard's OnLost fires, fn's ctx ends with ErrLockLost, Do fails and writes
// nothing) and must leave the lock as the newer holder has it: its token,
// its 1 s lease. fn stays until the lock has been read, so that the newer
// holder, whose claim waits for fn's transaction, still holds the lock then.
// A renewal that renewed whatever lock holds the key would let the older
// holder go on as if it held the lock, under a lease stretched over the
// newer holder's. The newer holder then claims and commits.
func (lg *lostGrant) learnsLoss(ctx context.Context, t *testing.T) {
	t.Helper()
	e := lg.e
	names, err := redislock.KeyNamesFor(e.prefix, e.item)
	mustNoErr(t, err, "key names")
	lg.warm(ctx, t)
	type loss struct {
		token uint64
		at    time.Time
	}
	lost := make(chan loss, 1)
	lg.renewing.onLost(func(tok uint64) {
		select {
		case lost <- loss{token: tok, at: time.Now()}:
		default:
		}
	})
	defer lg.renewing.onLost(nil)
	var newerToken atomic.Uint64
	var newerAt atomic.Int64
	lg.newer.onAcquired(func(tok uint64) {
		if newerToken.CompareAndSwap(0, tok) {
			newerAt.Store(time.Now().UnixNano())
		}
	})
	defer lg.newer.onAcquired(nil)

	at, ended, resume := make(chan inFn, 1), make(chan error, 1), make(chan struct{})
	resumeOnce := sync.OnceFunc(func() { close(resume) })
	defer resumeOnce()
	stayPastLoss := func(ctx context.Context, tx *guard.Tx) error {
		select {
		case at <- inFn{token: tx.Token(), attempt: tx.Attempt()}:
		default:
		}
		<-ctx.Done()
		ended <- context.Cause(ctx)
		<-resume
		return context.Cause(ctx)
	}
	oldRes := make(chan Op, 1)
	go func() { oldRes <- lg.renewing.buy(ctx, 1, 20*time.Second, stayPastLoss) }()
	old := awaitInFn(t, at, oldRes, 10*time.Second, "older holder")
	mustNoErr(t, e.dropGrant(ctx, lg.rdb), "drop the grant")
	newRes := make(chan Op, 1)
	go func() { newRes <- lg.newer.buy(ctx, 1, 20*time.Second, nil) }()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = waitFor(wctx, 5*time.Millisecond, func() (bool, error) {
		n, err := e.claimsWaiting(wctx)
		return n > 0, err
	})
	cancel()
	mustNoErr(t, err, "the newer holder's claim waiting for the older transaction")

	var l loss
	var cause error
	select {
	case cause = <-ended:
	case <-time.After(5 * time.Second):
		v, _ := lg.rdb.Get(ctx, names.Lock).Result()
		t.Fatalf("the older holder (token %d, 3 s lease) was not told within 5 s that it lost the lock; lock %q, newer holder's token %d",
			old.token, v, newerToken.Load())
	}
	select {
	case l = <-lost: // guard calls OnLost just after it ends fn's ctx
	case <-time.After(5 * time.Second):
		t.Errorf("fn's ctx of the older holder ended (%v) without guard's OnLost", cause)
	}
	// The older holder's renewal has run; the newer holder, its claim still
	// waiting for the older transaction, holds the lock.
	pttl, perr := lg.rdb.PTTL(ctx, names.Lock).Result()
	v, verr := lg.rdb.Get(ctx, names.Lock).Result()
	resumeOnce()
	tok, _, _ := strings.Cut(v, "|")
	t.Logf("older holder (token %d) told of the loss %v after the newer holder's grant (token %d): %v; lock then %q, pttl %v",
		old.token, l.at.Sub(time.Unix(0, newerAt.Load())).Round(time.Millisecond), newerToken.Load(), cause, v, pttl)
	switch {
	case !errors.Is(cause, guard.ErrLockLost):
		t.Errorf("the older holder's fn ctx ended with %v, want ErrLockLost", cause)
	case l.token != old.token:
		t.Errorf("OnLost reported token %d, want the older holder's %d", l.token, old.token)
	case newerAt.Load() == 0 || l.at.Before(time.Unix(0, newerAt.Load())):
		t.Fatalf("the older holder learned of the loss before the newer holder was granted: the round did not test a renewal under a new holder")
	case perr != nil || verr != nil:
		t.Errorf("read the lock after the loss: %v %v", perr, verr)
	case tok != strconv.FormatUint(newerToken.Load(), 10):
		t.Errorf("lock %q after the older holder's renewal, want the newer holder's token %d", v, newerToken.Load())
	case pttl > fastLocks.lease:
		t.Errorf("the newer holder's lease is %v after the older holder's renewal, above its own %v", pttl, fastLocks.lease)
	}
	oldOp := awaitOp(t, oldRes, 20*time.Second, "older holder")
	newOp := awaitOp(t, newRes, 20*time.Second, "newer holder")
	if oldOp.Outcome != Failed {
		t.Errorf("older holder, told of the loss inside fn: %s (%s), want failed (lock lost)", oldOp.Outcome, oldOp.Err)
	}
	if newOp.Outcome != Accepted || newOp.Token != newerToken.Load() {
		t.Errorf("newer holder: %s (%s) under token %d, want accepted under %d", newOp.Outcome, newOp.Err, newOp.Token, newerToken.Load())
	}
}

// warm runs a window of normal buying, then waits for a free lock: each
// round's older holder is granted the lock directly, with its own long
// lease, rather than handed it by a previous holder.
func (lg *lostGrant) warm(ctx context.Context, t *testing.T) {
	t.Helper()
	lctx, stop := context.WithTimeout(ctx, 600*time.Millisecond)
	lg.e.load(lctx, 15*time.Millisecond, lg.load...)()
	stop()
	mustNoErr(t, lg.e.awaitFree(ctx, lg.rdb, 5*time.Second), "lock free after the load window")
}

// startHeld starts a buy by c that stays inside fn (after reading the stock,
// before writing) until release is closed, and waits until it is there.
func startHeld(ctx context.Context, t *testing.T, c *client, who string) (at chan inFn, release chan struct{}, res chan Op, f inFn) {
	t.Helper()
	at, release, res = make(chan inFn, 1), make(chan struct{}), make(chan Op, 1)
	go func() { res <- c.buy(ctx, 1, 20*time.Second, holdFirstAttempt(at, release)) }()
	return at, release, res, awaitInFn(t, at, res, 10*time.Second, who)
}

// Scenario: the grant is lost in Redis (its keys vanish, as in a failover to
// a replica that missed them) while the holder is inside fn, having read the
// stock and not yet written. The holder does not know: its next renewal is
// seconds away. A newer holder is granted the lock at once and starts its
// own buy. The older holder resumes as soon as the newer one is either
// waiting for the fence row (what must happen: the older transaction claimed
// it first) or inside fn. Both may commit, but serialised by the fence row:
// the newer buy must read the older one's write. Had the newer holder read
// the stock while the older transaction was still open, the older commit
// would be lost under the newer one's write.
func TestScenarioLostGrantInFn(t *testing.T) {
	lg := newLostGrant(t, "lost-grant-in-fn", false)
	e := lg.e
	ctx := ctxT(t, 60*time.Second)
	for round := 0; round < 3; round++ {
		lg.warm(ctx, t)
		_, release, oldRes, old := startHeld(ctx, t, lg.older, "older holder")
		mustNoErr(t, e.dropGrant(ctx, lg.rdb), "drop the grant")
		newAt, newRelease, newRes := make(chan inFn, 1), make(chan struct{}), make(chan Op, 1)
		go func() { newRes <- lg.newer.buy(ctx, 1, 20*time.Second, holdFirstAttempt(newAt, newRelease)) }()

		var early *inFn
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := waitFor(wctx, 5*time.Millisecond, func() (bool, error) {
			select {
			case f := <-newAt:
				early = &f
				return true, nil
			default:
			}
			n, err := e.claimsWaiting(wctx)
			return n > 0, err
		})
		cancel()
		close(release)
		if err != nil {
			close(newRelease)
			t.Fatalf("round %d: the newer holder neither waited for the fence row nor reached fn: %v", round, err)
		}
		oldOp := awaitOp(t, oldRes, 20*time.Second, "older holder")
		close(newRelease)
		newOp := awaitOp(t, newRes, 20*time.Second, "newer holder")
		t.Logf("round %d: older holder (token %d) %s %s; newer holder (token %d) %s %s; newer ran fn before the older one ended: %v",
			round, old.token, oldOp.Outcome, oldOp.Err, newOp.Token, newOp.Outcome, newOp.Err, early != nil)
		if newOp.Token <= old.token {
			t.Fatalf("round %d: the newer holder's token %d is not above the older one's %d: the grant was not lost", round, newOp.Token, old.token)
		}
		if early != nil {
			t.Errorf("round %d: the newer holder (token %d) ran fn while the older holder's transaction (token %d) was still open", round, early.token, old.token)
		}
		if newOp.Outcome != Accepted {
			t.Errorf("round %d: newer holder: %s (%s), want accepted", round, newOp.Outcome, newOp.Err)
		}
	}
	lg.learnsLoss(ctx, t)
	lg.warm(ctx, t)
	e.finish()
}

// Scenario: as above, but the older holder's MySQL connection is also killed
// while it is inside fn, after its claim. The newer holder is granted the
// lock and commits. Then the older holder resumes: its next statement finds
// the connection gone, and guard retries the transaction under the same
// lock and token, which it still believes it holds. The retried attempt
// must claim the fence row again and be fenced; had it run without a claim,
// it would commit a write under an older token after a newer one. The
// Guards hold the lock until the transaction ends (guard.HandOffAtEnd, no
// relaying), so that the retry keeps its turn and token.
func TestScenarioLostGrantRetry(t *testing.T) {
	runLostGrantRetry(t, newLostGrant(t, "lost-grant-retry", true), true)
}

// As lost-grant-retry, with the defaults: the older holder's lock was handed
// on at its claim, so its retry takes a new turn and a new token. It may
// then commit, but only under a token above the newer holder's, and never
// run fn again under its old token.
func TestScenarioLostGrantRetryHandOff(t *testing.T) {
	runLostGrantRetry(t, newLostGrant(t, "lost-grant-retry-handoff", false), false)
}

// runLostGrantRetry runs the lost-grant-retry scenarios on lg; atEnd
// requires the retried attempt to be fenced.
func runLostGrantRetry(t *testing.T, lg *lostGrant, atEnd bool) {
	e := lg.e
	ctx := ctxT(t, 60*time.Second)
	for round := 0; round < 3; round++ {
		lg.warm(ctx, t)
		at, release, oldRes, old := startHeld(ctx, t, lg.older, "older holder")
		err := e.killConn(ctx, old.conn)
		if err == nil {
			err = e.dropGrant(ctx, lg.rdb)
		}
		if err != nil {
			close(release)
			t.Fatalf("round %d: kill the older holder's connection and drop its grant: %v", round, err)
		}
		newOp := lg.newer.buy(ctx, 1, 10*time.Second, nil)
		if newOp.Outcome != Accepted || newOp.Token <= old.token {
			close(release)
			t.Fatalf("round %d: newer holder: %s (%s) with token %d, want accepted above %d", round, newOp.Outcome, newOp.Err, newOp.Token, old.token)
		}
		close(release)
		oldOp := awaitOp(t, oldRes, 20*time.Second, "older holder")
		t.Logf("round %d: newer holder committed token %d; older holder (token %d) retried: %s %s",
			round, newOp.Token, old.token, oldOp.Outcome, oldOp.Err)
		if !atEnd {
			// A new turn: fn may run again, under a token above the one
			// that committed meanwhile.
			if oldOp.Outcome == Accepted && oldOp.Token <= newOp.Token {
				t.Errorf("round %d: older holder's retry accepted under token %d, not above %d", round, oldOp.Token, newOp.Token)
			}
			for len(at) > 0 {
				if f := <-at; f.token <= newOp.Token {
					t.Errorf("round %d: attempt %d of the older holder ran fn under token %d after token %d committed", round, f.attempt, f.token, newOp.Token)
				}
			}
			continue
		}
		if oldOp.Outcome != Fenced {
			t.Errorf("round %d: older holder's retried attempt (token %d, after %d committed): %s (%s), want fenced",
				round, old.token, newOp.Token, oldOp.Outcome, oldOp.Err)
		}
		select {
		case f := <-at:
			t.Errorf("round %d: attempt %d of the older holder (token %d) ran fn after token %d committed", round, f.attempt, f.token, newOp.Token)
		default:
		}
	}
	lg.learnsLoss(ctx, t)
	lg.warm(ctx, t)
	e.finish()
}
