package chaos

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// batchMembers is how many buyers each batching process runs at once.
const batchMembers = 6

// Scenario "batched": two processes whose Guards combine queued callers
// (guard.Options.MaxBatch), each with several buyers at once, so that most
// transactions carry several buys. Faults for the whole run: the lock's
// Redis keys are deleted under its holders (two processes' batches then
// overlap and only the fence row serialises them), and connections in the
// middle of a statement, a batch member's work or its COMMIT are killed.
// Every member's buy must be linearizable on its own, nothing oversold, an
// order present exactly for the buys Do reported committed (or whose
// outcome it could not know). The Guards hold the lock until a batch's
// transaction ends (guard.HandOffAtEnd, no relaying).
func TestScenarioBatched(t *testing.T) {
	runBatched(t, newEnv(t, "batched", 100_000), guard.Options{HandOff: guard.HandOffAtEnd, NoRelay: true})
}

// Scenario "batched-handoff": as batched, with Guards on the defaults, whose
// batches hand the lock on at their claim and chain their transactions to
// the key's next batch (guard.HandOffAuto, relaying): the next
// batch's claim waits for the running batch's fence row, and a batch that
// must run again after the hand-off takes a new turn.
func TestScenarioBatchedHandOff(t *testing.T) {
	runBatched(t, newEnv(t, "batched-handoff", 100_000), guard.Options{})
}

// runBatched runs the batched scenarios on e, with Guards of options opt
// besides the batching ones.
func runBatched(t *testing.T, e *env, opt guard.Options) {
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 90*time.Second)

	var buyers []*client
	var retries atomic.Int64
	for range 2 {
		db := e.open(e.dsn)
		db.SetMaxOpenConns(4)
		c := e.newClient(srv.Client(), db, fastLocks)
		o := opt
		o.MaxAttempts, o.UnlockTimeout, o.MaxBatch = 2, 2*time.Second, 8
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		o.Hooks.OnRetry = func(string, int, error) { retries.Add(1) }
		c.g = guard.New(c.locker, db, &o)
		buyers = append(buyers, c)
		// Buyers of one process share its Guard (that is what batches them)
		// and each has a history process of its own.
		for range batchMembers - 1 {
			buyers = append(buyers, e.member(c))
		}
	}
	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.loadHolding(lctx, 20*time.Millisecond, 2*time.Millisecond, buyers...)
	defer func() { stop(); waitLoad() }()

	faults, kills := e.dropGrantsAndKill(lctx, srv.Client(), 7)
	time.Sleep(6 * time.Second)
	stop()
	faults()
	waitLoad()
	s := e.finish()
	var txs, batches int
	mustNoErr(t, e.db.GetContext(ctx, &txs, "SELECT COUNT(DISTINCT fence_op) FROM orders WHERE item = ?", e.item), "count transactions")
	mustNoErr(t, e.db.GetContext(ctx, &batches,
		"SELECT COUNT(*) FROM (SELECT fence_op FROM orders WHERE item = ? GROUP BY fence_op HAVING COUNT(*) >= 2) b", e.item), "count batches")
	t.Logf("%d orders in %d transactions, %d of them of 2 buys or more; %d connections killed; retries %d",
		s.Orders, txs, batches, kills.Load(), retries.Load())
	// With the lock handed on at the claim, two batches of a process are
	// under way at once (one running, one whose claim waits), so batches
	// are smaller than when the lock is held until COMMIT; a third of the
	// transactions carrying several buys still exercises batching.
	if 3*batches < txs {
		t.Errorf("%d of %d transactions carried 2 buys or more: the scenario did not exercise batching", batches, txs)
	}
	if kills.Load() == 0 || retries.Load()+int64(s.Failed+s.Unknown) == 0 {
		t.Errorf("%d kills, %d retries, %d failed and %d unknown buys: the kills never hit a transaction", kills.Load(), retries.Load(), s.Failed, s.Unknown)
	}
}

// member returns a client with a history process of its own that runs on
// c's Guard, as one more goroutine of the same application instance.
func (e *env) member(c *client) *client {
	e.clients++
	return &client{e: e, id: e.clients, g: c.g, locker: c.locker, db: c.db, doRead: c.doRead}
}

// dropGrantsAndKill, until ctx ends, alternately deletes the lock's Redis
// keys under their holders and kills a connection of e's database that is
// in a transaction (running a statement or between two), every 150 to
// 350ms, randomly from seed. wait returns once it has stopped; kills counts
// the connections killed.
func (e *env) dropGrantsAndKill(ctx context.Context, rdb *redis.Client, seed uint64) (wait func(), kills *atomic.Int64) {
	killer := e.open(e.dsn)
	killer.SetMaxOpenConns(1)
	kills = new(atomic.Int64)
	var wg sync.WaitGroup
	wg.Go(func() {
		r := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(150+r.IntN(200)) * time.Millisecond):
			}
			if i%2 == 0 {
				_ = e.dropGrant(ctx, rdb)
				continue
			}
			var ids []int64
			if err := killer.SelectContext(ctx, &ids, "SELECT p.ID FROM information_schema.PROCESSLIST p"+
				" JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID"+
				" WHERE p.DB = DATABASE() AND p.ID <> CONNECTION_ID()"); err != nil || len(ids) == 0 {
				continue
			}
			if _, err := killer.ExecContext(ctx, "KILL ?", ids[r.IntN(len(ids))]); err == nil {
				kills.Add(1)
			}
		}
	})
	return wg.Wait, kills
}
