package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// Scenario: token replay by a cloned holder, under load. A second writer
// (see [ReplayBuy]) presents the token the holder was granted, under an
// owner of its own, while the real holder writes too. Two cases,
// alternating: the clone claims while the holder is inside fn (its claim
// waits for the holder's fence row and must then be refused), and the clone
// claims first while the holder's statements are held back on their way to
// MySQL (the holder's claim must then be refused). An equal token from
// another owner is stale: at most one of the two may commit, and no two
// orders may carry the same token.
func TestScenarioTokenReplay(t *testing.T) {
	e := newEnv(t, "token-replay", 600)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 60*time.Second)

	mpx := NewProxy(t, "holder-mysql", e.mysqlAddr())
	holderDB := e.open(e.dsnVia(mpx.Addr, nil))
	mustNoErr(t, holderDB.PingContext(ctx), "warm the holder's pool")
	holder := e.newClient(srv.Client(), holderDB, fastLocks)
	load := []*client{e.newClient(srv.Client(), e.db, fastLocks), e.newClient(srv.Client(), e.db, fastLocks)}
	resource := holder.g.FenceResource(e.item)

	const cloneID = 200
	replay := func(token uint64) <-chan Op {
		res := make(chan Op, 1)
		p := e.h.Invoke(cloneID, Buy, 1)
		go func() {
			err := ReplayBuy(ctx, e.db, resource, e.item, p.ID(), 1, token, "clone-of-holder")
			res <- p.Return(Classify(err), 0, token, err)
		}()
		return res
	}

	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.load(lctx, 15*time.Millisecond, load...)
	defer func() { stop(); waitLoad() }()

	for round := 0; round < 4; round++ {
		time.Sleep(400 * time.Millisecond) // a window of normal buying
		var holderOp, cloneOp Op
		var token uint64
		if round%2 == 0 {
			// The clone replays the token of a holder that is inside fn.
			_, release, res, f := startHeld(ctx, t, holder, "holder")
			token = f.token
			cloneRes := replay(token)
			var early *Op
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := waitFor(wctx, 5*time.Millisecond, func() (bool, error) {
				select {
				case op := <-cloneRes:
					early = &op
					return true, nil
				default:
				}
				n, err := e.claimsWaiting(wctx)
				return n > 0, err
			})
			cancel()
			close(release)
			mustNoErr(t, err, "the clone's claim waiting for the holder's fence row")
			holderOp = awaitOp(t, res, 20*time.Second, "holder")
			if early != nil {
				cloneOp = *early
			} else {
				cloneOp = awaitOp(t, cloneRes, 20*time.Second, "clone")
			}
			if holderOp.Outcome != Accepted || cloneOp.Outcome != Fenced {
				t.Errorf("round %d: holder inside fn %s (%s), clone replaying its token %s (%s); want accepted and fenced",
					round, holderOp.Outcome, holderOp.Err, cloneOp.Outcome, cloneOp.Err)
			}
		} else {
			// The clone replays the token before the holder's claim arrives.
			var res <-chan Op
			var hold *Toxic
			token, res, hold = buyHeld(ctx, t, holder, mpx, 10*time.Second)
			cloneOp = awaitOp(t, replay(token), 20*time.Second, "clone")
			mustNoErr(t, hold.Remove(), "release the holder's statements")
			holderOp = awaitOp(t, res, 30*time.Second, "holder")
			if cloneOp.Outcome != Accepted || holderOp.Outcome != Fenced {
				t.Errorf("round %d: clone claiming first %s (%s), holder %s (%s); want accepted and fenced",
					round, cloneOp.Outcome, cloneOp.Err, holderOp.Outcome, holderOp.Err)
			}
		}
		t.Logf("round %d: token %d: holder %s, clone %s", round, token, holderOp.Outcome, cloneOp.Outcome)
		if holderOp.Outcome == Accepted && cloneOp.Outcome == Accepted {
			t.Errorf("round %d: the holder and its clone both committed under token %d", round, token)
		}
	}
	time.Sleep(400 * time.Millisecond)
	stop()
	waitLoad()
	e.finish()
}
