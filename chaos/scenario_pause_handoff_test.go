package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// Scenario 2b: as scenario 2, with every Guard handing the lock on at the
// claim (guard.Options.HandOffAtClaim, and RelayConns). The holder process
// is frozen inside fn after its claim, so the next caller already holds the
// lock: its claim waits for the frozen transaction's fence row until the
// database ends that transaction (idle_transaction_timeout, or a KILL), then
// commits. When the frozen process resumes, its transaction is gone: the
// write it then makes must not be applied under its old token. Its retry
// takes a new turn of the lock and a new token, above the one that
// committed meanwhile, and may succeed as a fresh critical section.
func TestScenarioPausedHolderHandOff(t *testing.T) {
	e := newEnv(t, "paused-holder-handoff", 2000)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 90*time.Second)

	params := map[string]string{}
	var v string
	if err := e.db.GetContext(ctx, &v, "SELECT @@idle_transaction_timeout"); err == nil {
		params["idle_transaction_timeout"] = "2"
	}
	locks := fastLocks
	locks.handOff = true
	h := StartHolder(t, holder(t), HolderConfig{Redis: srv.Addr, DSN: e.dsnVia("", params), Item: e.item, Prefix: e.prefix,
		LeaseTTL: locks.lease, WaiterTimeout: locks.waiter, Recheck: locks.recheck, HandOff: true})
	load := []*client{e.newClient(srv.Client(), e.db, locks), e.newClient(srv.Client(), e.db, locks)}
	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.load(lctx, 15*time.Millisecond, load...)
	defer func() { stop(); waitLoad() }()

	const holderID = 100
	for round := 0; round < 2; round++ {
		time.Sleep(600 * time.Millisecond) // a window of normal buying
		b := e.sendBuy(h, holderID, 1, true)
		t1, conn, err := infn(ctx, h)
		mustNoErr(t, err, "holder inside fn")
		mustNoErr(t, h.Stop(), "SIGSTOP")
		frozen := time.Now()
		mustNoErr(t, h.Send("go"), "send go")
		// The retry, in a new turn, pauses in fn again: let it go on too (a
		// "go" nobody waits for is ignored).
		mustNoErr(t, h.Send("go"), "send go for the retry")
		if _, ok := params["idle_transaction_timeout"]; !ok {
			time.AfterFunc(2*time.Second, func() { _, _ = e.db.ExecContext(context.Background(), "KILL ?", conn) })
		}
		t2, err := e.awaitCommit(ctx, t1, 20*time.Second)
		mustNoErr(t, err, "another holder committing while the first is frozen")
		t.Logf("round %d: holder frozen with token %d; token %d committed %v later", round, t1, t2, time.Since(frozen).Round(time.Millisecond))
		mustNoErr(t, h.Continue(), "SIGCONT")
		op, err := b.done(ctx)
		mustNoErr(t, err, "frozen holder's result")
		t.Logf("round %d: resumed holder: %s token %d %s", round, op.Outcome, op.Token, op.Err)
		if n := e.ordersWithToken(t1); n != 0 {
			t.Errorf("round %d: %d orders written under the frozen holder's token %d", round, n, t1)
		}
		if op.Outcome == Accepted && op.Token <= t2 {
			t.Errorf("round %d: the resumed holder's buy was accepted under token %d, not above %d, which committed while it was frozen", round, op.Token, t2)
		}
		if strings.Contains(op.Err, "panic") {
			t.Errorf("holder panicked: %s", op.Err)
		}
	}
	b := e.sendBuy(h, holderID, 1, false)
	op, err := b.done(ctx)
	mustNoErr(t, err, "holder's next buy")
	if op.Outcome != Accepted && op.Outcome != SoldOut {
		t.Errorf("holder's buy after resuming: %s %s", op.Outcome, op.Err)
	}
	time.Sleep(600 * time.Millisecond)
	stop()
	waitLoad()
	e.finish()
}
