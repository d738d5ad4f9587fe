package chaos

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// Scenario 5: the MySQL connection of a holder is KILLed from another
// session during COMMIT, under load. Two cases, alternating: the KILL lands
// before the COMMIT reaches the server (nothing committed: Do must say
// ErrNotCommitted), and the COMMIT is applied but its reply is lost and the
// connection then killed (Do must find out it committed and return nil).
// Either way nothing is applied twice. The Guards hold the lock until the
// transaction ends (guard.HandOffAtEnd, no relaying), so no newer claim can
// land before Do settles the outcome.
func TestScenarioKillDuringCommit(t *testing.T) {
	runKillDuringCommit(t, newEnv(t, "kill-during-commit", 2000), true)
}

// Scenario 5b: as scenario 5, with the defaults, which hand the lock on at
// the claim: the next holder's claim, waiting for the killed transaction's
// fence row, may go through before Do settles the outcome, which Do may
// then report as unknown (ErrOutcomeUnknown). It must never report a wrong
// definite outcome: nil for a COMMIT that did not apply, ErrNotCommitted
// for one that did.
func TestScenarioKillDuringCommitHandOff(t *testing.T) {
	runKillDuringCommit(t, newEnv(t, "kill-during-commit-handoff", 2000), false)
}

// runKillDuringCommit runs the kill-during-commit scenarios on e; atEnd
// holds the lock until the transaction ends, and requires Do to settle every
// outcome.
func runKillDuringCommit(t *testing.T, e *env, atEnd bool) {
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 120*time.Second)

	mpx := NewProxy(t, "victim-mysql", e.mysqlAddr())
	cfg, err := mysql.ParseDSN(e.dsn)
	mustNoErr(t, err, "parse DSN")
	rt := &router{direct: e.mysqlAddr(), proxied: mpx.Addr}
	cfg.DialFunc = rt.dial
	base, err := mysql.NewConnector(cfg)
	mustNoErr(t, err, "connector")
	var hook atomic.Pointer[func()]
	vdb := sqlx.NewDb(sql.OpenDB(&commitHookConnector{Connector: base, hook: &hook}), "mysql")
	t.Cleanup(func() { _ = vdb.Close() })
	vdb.SetMaxIdleConns(0) // every transaction dials anew, through the route chosen for it
	locks := fastLocks
	locks.atEnd = atEnd
	victim := e.newClient(srv.Client(), vdb, locks)
	load := []*client{e.newClient(srv.Client(), e.db, locks), e.newClient(srv.Client(), e.db, locks)}

	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.load(lctx, 15*time.Millisecond, load...)
	defer func() { stop(); waitLoad() }()

	kill := func(conn int64) error {
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := e.db.ExecContext(kctx, "KILL ?", conn); err != nil {
			return err
		}
		return waitFor(kctx, 10*time.Millisecond, func() (bool, error) {
			var n int
			err := e.db.GetContext(kctx, &n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", conn)
			return n == 0, err
		})
	}

	for round := 0; round < 6; round++ {
		// Let the others buy for a moment between faults.
		time.Sleep(300 * time.Millisecond)
		committedCase := round%2 == 1
		var conn int64
		var token uint64
		hookErr := make(chan error, 1)
		var f func()
		if !committedCase {
			f = func() { hookErr <- kill(conn) }
		} else {
			rt.viaProxy.Store(true)
			f = func() {
				// Swallow the COMMIT's reply, then, once the commit is
				// visible from another session, kill the connection. New
				// connections (the outcome check) go direct.
				down, err := mpx.Blackhole(Downstream)
				if err != nil {
					hookErr <- err
					return
				}
				rt.viaProxy.Store(false)
				go func() {
					// The order carries this Do's token, unique to it.
					err := waitFor(ctx, 5*time.Millisecond, func() (bool, error) {
						var n int
						err := e.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM orders WHERE token = ?", token)
						return n > 0, err
					})
					if err == nil {
						err = kill(conn)
					}
					hookErr <- errors.Join(err, down.Remove())
				}()
			}
		}
		// The hook is armed from fn, so that it fires at this transaction's
		// COMMIT and not at one that runs before it (guard creates a new
		// key's fence row in a short transaction of its own).
		recordConn := func(ctx context.Context, tx *guard.Tx) error {
			token = tx.Token()
			if err := tx.QueryRowxContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
				return err
			}
			hook.Store(&f)
			return nil
		}
		op := victim.buy(ctx, 1, 30*time.Second, recordConn)
		hook.Store(nil)
		rt.viaProxy.Store(false)
		select {
		case err := <-hookErr:
			mustNoErr(t, err, "kill during commit")
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the COMMIT hook never ran (outcome %s %s)", round, op.Outcome, op.Err)
		}
		n := e.ordersOf(op.ID)
		t.Logf("round %d (committed before kill: %v): Do -> %s %s; orders %d", round, committedCase, op.Outcome, op.Err, n)
		switch {
		case op.Outcome == Accepted && n != 1, op.Outcome == Failed && n != 0:
			t.Errorf("round %d: Do -> %s (%s) but %d orders: a wrong definite outcome", round, op.Outcome, op.Err, n)
		case !atEnd:
			// Unknown is allowed: a newer claim may have landed first.
		case committedCase && (op.Outcome != Accepted || n != 1):
			t.Errorf("round %d: commit applied but reply lost: Do -> %s (%s), orders %d; want nil and 1", round, op.Outcome, op.Err, n)
		case !committedCase && (op.Outcome != Failed || n != 0):
			t.Errorf("round %d: killed before commit: Do -> %s (%s), orders %d; want ErrNotCommitted and 0", round, op.Outcome, op.Err, n)
		}
	}
	time.Sleep(400 * time.Millisecond)
	stop()
	waitLoad()
	e.finish()
}
