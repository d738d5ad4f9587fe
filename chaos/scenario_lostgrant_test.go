package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// lostGrant is the set-up shared by the lost-grant scenarios: an older
// holder whose lease is long (renewal every lease/3, so it does not learn of
// the loss within a round), a newer holder that is granted the lock once the
// grant is gone, and two buyers that load the item between rounds.
type lostGrant struct {
	e            *env
	rdb          *redis.Client
	older, newer *client
	load         []*client
}

// newLostGrant sets up a lost-grant scenario; atEnd runs every Guard with
// guard.HandOffAtEnd and no relaying instead of the defaults.
func newLostGrant(t *testing.T, name string, atEnd bool) *lostGrant {
	e := newEnv(t, name, 400)
	srv := testenv.RedisServer(t)
	olderDB := e.open(e.dsn) // a pool of its own, so that killing its connection touches nobody else
	locks := fastLocks
	locks.atEnd = atEnd
	return &lostGrant{
		e:     e,
		rdb:   srv.Client(),
		older: e.newClient(srv.Client(), olderDB, lockOpts{lease: 30 * time.Second, waiter: time.Second, recheck: 250 * time.Millisecond, atEnd: atEnd}),
		newer: e.newClient(srv.Client(), e.db, locks),
		load:  []*client{e.newClient(srv.Client(), e.db, locks), e.newClient(srv.Client(), e.db, locks)},
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
	lg.warm(ctx, t)
	e.finish()
}
