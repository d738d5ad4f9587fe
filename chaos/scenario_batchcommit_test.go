package chaos

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// Scenario "batch-commit-cut": a process whose Guard combines queued callers
// (guard.Options.MaxBatch) buys with several buyers at once, against a
// buyer of another process, and the COMMIT of one of its batches is cut,
// again and again: either the connection dies before the COMMIT reaches the
// server (nothing of the batch applied: every member must get an error that
// says so, or at worst that the outcome is unknown; never nil), or the
// COMMIT applies and its reply is lost with the connection (every member's
// work applied: nil, or unknown; never "not committed"). The Guards hold the
// lock until a batch's transaction ends (guard.HandOffAtEnd, no relaying),
// so that Do settles every outcome and a member must get nil exactly when
// its batch committed.
func TestScenarioBatchCommitCut(t *testing.T) {
	runBatchCommitCut(t, newEnv(t, "batch-commit-cut", 100_000), guard.Options{HandOff: guard.HandOffAtEnd, NoRelay: true}, true)
}

// Scenario "batch-commit-cut-handoff": as batch-commit-cut, with Guards on
// the defaults, whose batches hand the lock on at their claim and chain
// their transactions to the next batch: a newer claim may land before the
// cut batch settles, so an unknown outcome is allowed; a wrong definite one
// is not.
func TestScenarioBatchCommitCutHandOff(t *testing.T) {
	runBatchCommitCut(t, newEnv(t, "batch-commit-cut-handoff", 100_000), guard.Options{}, false)
}

// cutRound is one cut COMMIT: of the batch whose claim had operation id
// batch, either dropped before the server (drop) or with its reply lost.
type cutRound struct {
	drop  bool
	batch string
}

func runBatchCommitCut(t *testing.T, e *env, opt guard.Options, atEnd bool) {
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 120*time.Second)

	cutter := &commitCutter{fired: make(chan struct{}, 1)}
	cfg, err := mysql.ParseDSN(e.dsn)
	mustNoErr(t, err, "parse DSN")
	cfg.DialFunc = cutter.dial
	conn, err := mysql.NewConnector(cfg)
	mustNoErr(t, err, "connector")
	cutDB := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	t.Cleanup(func() { _ = cutDB.Close() })
	cutDB.SetMaxOpenConns(4)

	batcher := e.newClient(srv.Client(), cutDB, fastLocks)
	o := opt
	o.MaxAttempts, o.UnlockTimeout, o.MaxBatch = 2, 2*time.Second, 8
	batcher.g = guard.New(batcher.locker, cutDB, &o)
	e.checkPool(batcher.g)
	members := []*client{batcher}
	for range batchMembers - 1 {
		members = append(members, e.member(batcher))
	}
	locks := fastLocks
	locks.atEnd = atEnd
	other := e.newClient(srv.Client(), e.db, locks)

	var (
		batchOf sync.Map // buy op id -> operation id of the claim its work last ran under
		armed   atomic.Int32
		mu      sync.Mutex
		rounds  []cutRound
	)
	// Each member's fn notes its batch; the one that finds the scenario
	// armed arms the cutter for its batch's COMMIT, which comes after every
	// member's work in that batch.
	note := func(opID string) func(context.Context, *guard.Tx) error {
		return func(_ context.Context, tx *guard.Tx) error {
			batchOf.Store(opID, tx.OpID())
			if m := armed.Swap(0); m != 0 {
				mu.Lock()
				rounds = append(rounds, cutRound{drop: m == 2, batch: tx.OpID()})
				mu.Unlock()
				cutter.arm(m == 2)
			}
			return nil
		}
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range members {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c.id), uint64(time.Now().UnixNano())))
			for lctx.Err() == nil {
				qty := 1 + r.IntN(3)
				p := e.h.Invoke(c.id, Buy, qty)
				bctx, cancel := context.WithTimeout(lctx, 8*time.Second)
				var token uint64
				fn := BuyFn(e.item, p.ID(), qty, note(p.ID()))
				err := c.g.Do(bctx, e.item, func(ctx context.Context, tx *guard.Tx) error {
					token = tx.Token()
					return fn(ctx, tx)
				})
				cancel()
				p.Return(Classify(err), 0, token, err)
				select {
				case <-lctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
	waitOther := e.load(lctx, 20*time.Millisecond, other)
	defer func() { stop(); wg.Wait(); waitOther() }()

	const cuts = 8
	for round := range cuts {
		time.Sleep(300 * time.Millisecond) // a window of normal buying
		mode := int32(1)
		if round%2 == 0 {
			mode = 2
		}
		armed.Store(mode)
		select {
		case <-cutter.fired:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: no batch reached its COMMIT", round)
		}
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	wg.Wait()
	waitOther()
	e.finish()

	ops := map[string]Op{}
	for _, op := range e.h.Ops() {
		ops[op.ID] = op
	}
	multi := 0
	for i, r := range rounds {
		var in []Op
		batchOf.Range(func(k, v any) bool {
			if v.(string) == r.batch {
				in = append(in, ops[k.(string)])
			}
			return true
		})
		var orders int
		mustNoErr(t, e.db.GetContext(ctx, &orders, "SELECT COUNT(*) FROM orders WHERE fence_op = ?", r.batch), "count the batch's orders")
		counts := map[Outcome]int{}
		for _, op := range in {
			counts[op.Outcome]++
		}
		t.Logf("cut %d (dropped before the server: %v): batch of %d members, %d orders; accepted %d, failed %d, unknown %d",
			i, r.drop, len(in), orders, counts[Accepted], counts[Failed], counts[Unknown])
		if len(in) >= 2 {
			multi++
		}
		switch {
		case r.drop && (counts[Accepted] != 0 || orders != 0):
			t.Errorf("cut %d: COMMIT never reached the server, but %d members got nil (%d orders)", i, counts[Accepted], orders)
		case !r.drop && counts[Failed] != 0:
			t.Errorf("cut %d: COMMIT applied (%d orders), but %d members were told it did not", i, orders, counts[Failed])
		case !r.drop && orders != len(in):
			t.Errorf("cut %d: COMMIT applied with %d orders for %d members", i, orders, len(in))
		case atEnd && r.drop && counts[Failed] != len(in):
			t.Errorf("cut %d: holding the lock until the end, %d of %d members were told the batch did not commit", i, counts[Failed], len(in))
		case atEnd && !r.drop && counts[Accepted] != len(in):
			t.Errorf("cut %d: holding the lock until the end, %d of %d members were told the batch committed", i, counts[Accepted], len(in))
		}
	}
	if len(rounds) != cuts || multi < cuts/4 {
		t.Errorf("%d cuts made, %d of them of a batch of 2 members or more: the scenario did not exercise batching", len(rounds), multi)
	}
}

// commitCutter dials MySQL connections of which it cuts the next COMMIT
// once armed (whichever connection sends it: CALL redfence_commit(),
// CALL redfence_commit_relay() or COMMIT): with drop, the connection is
// closed instead of sending it, so the server rolls the transaction back;
// otherwise the COMMIT is sent, its reply read and thrown away and the
// connection closed, so the server committed and the client cannot know.
type commitCutter struct {
	armed atomic.Int32 // 0 off, 1 lose the reply, 2 drop
	fired chan struct{}
}

func (c *commitCutter) arm(drop bool) {
	if drop {
		c.armed.Store(2)
	} else {
		c.armed.Store(1)
	}
}

func (c *commitCutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c}, nil
}

func (c *commitCutter) signal() {
	select {
	case c.fired <- struct{}{}:
	default:
	}
}

type cutConn struct {
	net.Conn
	c         *commitCutter
	loseReply atomic.Bool
}

// isCommitPacket reports whether p is a COM_QUERY packet (3-byte length,
// sequence number, command 3) of a statement that commits.
func isCommitPacket(p []byte) bool {
	if len(p) < 5 || p[4] != 3 {
		return false
	}
	q := string(p[5:])
	return q == "COMMIT" || strings.HasPrefix(q, "CALL redfence_commit('") || strings.HasPrefix(q, "CALL redfence_commit_relay('")
}

func (c *cutConn) Write(p []byte) (int, error) {
	if isCommitPacket(p) {
		if c.c.armed.CompareAndSwap(2, 0) {
			_ = c.Conn.Close()
			c.c.signal()
			return 0, syscall.ECONNRESET
		}
		if c.c.armed.CompareAndSwap(1, 0) {
			c.loseReply.Store(true)
		}
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Read(p []byte) (int, error) {
	if c.loseReply.CompareAndSwap(true, false) {
		_, _ = c.Conn.Read(p) // the COMMIT's answer: it applied
		_ = c.Conn.Close()
		c.c.signal()
		return 0, syscall.ECONNRESET
	}
	return c.Conn.Read(p)
}
