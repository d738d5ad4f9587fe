package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// Scenario 2: the holder is a separate process, frozen with SIGSTOP inside
// fn after it claimed the fence and read the stock. Its lease runs out; the
// database ends its idle transaction (MariaDB's idle_transaction_timeout,
// the server-side bound a deployment sets so a frozen client cannot hold
// row locks forever); another holder acquires, claims and commits. Only then
// is the frozen process resumed: its late write must not be applied. Every
// Guard holds the lock until its transaction ends (guard.HandOffAtEnd, no
// relaying); scenario 2b runs the defaults.
func TestScenarioPausedHolder(t *testing.T) {
	runPausedHolder(t, newEnv(t, "paused-holder", 2000), false)
}

// runPausedHolder runs the paused-holder scenarios on e; handOff runs every
// Guard with the defaults, which hand the lock on at the claim (scenario
// 2b), and !handOff with guard.HandOffAtEnd and NoRelay (scenario 2).
func runPausedHolder(t *testing.T, e *env, handOff bool) {
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 90*time.Second)

	params := map[string]string{}
	var v string
	if err := e.db.GetContext(ctx, &v, "SELECT @@idle_transaction_timeout"); err == nil {
		params["idle_transaction_timeout"] = "2"
	}
	locks := fastLocks
	locks.atEnd = !handOff
	h := StartHolder(t, holder(t), HolderConfig{Redis: srv.Addr, DSN: e.dsnVia("", params), Item: e.item, Prefix: e.prefix,
		LeaseTTL: locks.lease, WaiterTimeout: locks.waiter, Recheck: locks.recheck, AtEnd: !handOff})
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
		// The holder stopped inside fn, so its transaction is open and holds
		// the fence row; if not, what follows tests nothing: say so.
		var open int
		mustNoErr(t, e.db.GetContext(ctx, &open, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?", conn), "holder's transaction")
		if open != 1 {
			t.Errorf("round %d: the frozen holder's transaction (token %d, connection %d) is not open", round, t1, conn)
		}
		// Queued for when it runs again: continue inside fn.
		mustNoErr(t, h.Send("go"), "send go")
		if handOff {
			// The retry, in a new turn, pauses in fn again: let it go on
			// too (a "go" nobody waits for is ignored).
			mustNoErr(t, h.Send("go"), "send go for the retry")
		}
		if _, ok := params["idle_transaction_timeout"]; !ok {
			// Servers without idle_transaction_timeout: end the frozen
			// client's transaction from outside, as a watchdog would.
			time.AfterFunc(2*time.Second, func() { _, _ = e.db.ExecContext(context.Background(), "KILL ?", conn) })
		}
		t2, err := e.awaitCommit(ctx, t1, 20*time.Second)
		mustNoErr(t, err, "another holder committing while the first is frozen")
		t.Logf("round %d: holder frozen with token %d; token %d committed %v later", round, t1, t2, time.Since(frozen).Round(time.Millisecond))
		mustNoErr(t, h.Continue(), "SIGCONT")
		op, err := b.done(ctx)
		mustNoErr(t, err, "frozen holder's result")
		t.Logf("round %d: resumed holder: %s token %d %s", round, op.Outcome, op.Token, op.Err)
		if handOff {
			// The retry takes a new turn and token, and may commit.
			if n := e.ordersWithToken(t1); n != 0 {
				t.Errorf("round %d: %d orders written under the frozen holder's token %d", round, n, t1)
			}
			if op.Outcome == Accepted && op.Token <= t2 {
				t.Errorf("round %d: the resumed holder's buy was accepted under token %d, not above %d, which committed while it was frozen", round, op.Token, t2)
			}
		} else {
			if op.Outcome == Accepted {
				t.Errorf("round %d: the resumed holder's buy (token %d) was accepted after token %d committed", round, t1, t2)
			}
			if n := e.ordersOf(op.ID); n != 0 {
				t.Errorf("round %d: the resumed holder's write was applied (%d orders)", round, n)
			}
		}
		if strings.Contains(op.Err, "panic") {
			t.Errorf("holder panicked: %s", op.Err)
		}
		if t.Failed() {
			e.logOrders(t, t1)
		}
	}
	// The resumed process keeps working normally.
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
