package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// env is one scenario's world: a private database with one stocked item,
// a history, and the clients that buy.
type env struct {
	t       *testing.T
	name    string
	db      *sqlx.DB // direct connection, for reads and checks
	dsn     string
	item    string
	stock   int
	prefix  string
	h       *History
	clients int
}

func newEnv(t *testing.T, name string, stock int) *env {
	t.Helper()
	db, dsn := testenv.MySQLWithDSN(t)
	e := &env{t: t, name: name, db: db, dsn: dsn, item: "sku-1", stock: stock, prefix: "chaos", h: NewHistory()}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := Setup(sctx, db, e.item, stock); err != nil {
		t.Fatal(err)
	}
	return e
}

// dsnVia returns the scenario's DSN with the server address replaced
// (by a proxy's) and extra session variables set.
func (e *env) dsnVia(addr string, params map[string]string) string {
	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	if addr != "" {
		cfg.Addr = addr
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for k, v := range params {
		cfg.Params[k] = v
	}
	return cfg.FormatDSN()
}

// mysqlAddr is the address of the MySQL server.
func (e *env) mysqlAddr() string {
	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg.Addr
}

// open opens a pool on dsn, closed when the test ends.
func (e *env) open(dsn string) *sqlx.DB {
	db, err := sqlx.Open("mysql", dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = db.Close() })
	return db
}

type lockOpts struct {
	lease, waiter, recheck time.Duration
	atEnd                  bool // guard.Options HandOffAtEnd and NoRelay instead of the defaults
}

var fastLocks = lockOpts{lease: time.Second, waiter: time.Second, recheck: 250 * time.Millisecond}

// client is one application instance: its own Locker and Guard.
type client struct {
	e      *env
	id     int
	g      *guard.Guard
	locker *redislock.Locker
	db     *sqlx.DB

	mu       sync.Mutex
	acquired func(token uint64)
	lost     func(token uint64)
	parent   *client // the client whose Guard a sibling shares
	// doRead: buys run through guard.DoRead, the item's read sent with the
	// claim (BuyAfterRead).
	doRead bool
}

func (e *env) newClient(rdb redis.UniversalClient, db *sqlx.DB, lo lockOpts) *client {
	e.t.Helper()
	c := &client{e: e, db: db}
	e.clients++
	c.id = e.clients
	c.locker = redislock.New(rdb, &redislock.Options{
		Prefix: e.prefix, LeaseTTL: lo.lease, WaiterTimeout: lo.waiter, RecheckInterval: lo.recheck,
	})
	e.t.Cleanup(func() { _ = c.locker.Close() })
	handOff := guard.HandOffAuto
	if lo.atEnd {
		handOff = guard.HandOffAtEnd
	}
	c.g = guard.New(c.locker, db, &guard.Options{
		MaxAttempts:   2,
		UnlockTimeout: 2 * time.Second,
		HandOff:       handOff,
		NoRelay:       lo.atEnd,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: guard.Hooks{OnAcquired: func(_ string, token uint64, _ time.Duration) {
			c.mu.Lock()
			f := c.acquired
			c.mu.Unlock()
			if f != nil {
				f(token)
			}
		}, OnLost: func(_ string, token uint64) {
			c.mu.Lock()
			f := c.lost
			c.mu.Unlock()
			if f != nil {
				f(token)
			}
		}},
	})
	e.checkPool(c.g)
	return c
}

// sibling returns another buyer in c's application instance: it shares c's
// Locker, Guard and pool (and c's onAcquired callback) and is recorded in
// the history as a client of its own.
func (c *client) sibling() *client {
	c.e.clients++
	return &client{e: c.e, id: c.e.clients, g: c.g, locker: c.locker, db: c.db, parent: c}
}

// checkPool makes the check of its pool that a Guard's first Do would make,
// so that the scenarios' first buys start with the lock, as later ones do.
func (e *env) checkPool(g *guard.Guard) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mustNoErr(e.t, g.CheckDatabase(ctx), "check the database pool")
}

// onAcquired sets a callback run when this client's next locks are granted.
func (c *client) onAcquired(f func(token uint64)) {
	if c.parent != nil {
		c.parent.onAcquired(f)
		return
	}
	c.mu.Lock()
	c.acquired = f
	c.mu.Unlock()
}

// onLost sets a callback run when guard finds one of this client's locks
// lost while a Do still watches it (guard.Hooks.OnLost).
func (c *client) onLost(f func(token uint64)) {
	if c.parent != nil {
		c.parent.onLost(f)
		return
	}
	c.mu.Lock()
	c.lost = f
	c.mu.Unlock()
}

// buy runs and records one buy of qty units, bounded by timeout.
func (c *client) buy(ctx context.Context, qty int, timeout time.Duration, pause func(context.Context, *guard.Tx) error) Op {
	p := c.e.h.Invoke(c.id, Buy, qty)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var token uint64
	fn := BuyFn(c.e.item, p.ID(), qty, pause)
	var read *guard.Read
	if c.doRead {
		r, after := BuyAfterRead(c.e.item, p.ID(), qty, pause)
		read, fn = &r, after
	}
	inFn := func(ctx context.Context, tx *guard.Tx) error {
		token = tx.Token()
		return fn(ctx, tx)
	}
	var err error
	if read != nil {
		err = c.g.DoRead(ctx, c.e.item, *read, inFn)
	} else {
		err = c.g.Do(ctx, c.e.item, inFn)
	}
	return p.Return(Classify(err), 0, token, err)
}

// read records one read of the stock through the direct connection.
func (e *env) read(ctx context.Context, clientID int) (Op, bool) {
	p := e.h.Invoke(clientID, Read, 0)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := ReadStock(ctx, e.db, e.item)
	if err != nil {
		// A failed read has no effect and tells nothing: not recorded.
		return Op{}, false
	}
	return p.Return(Ok, s, 0, nil), true
}

// load runs buyers on the given clients until ctx ends: each loops buying
// 1..3 units (reading the stock every few operations) with a short pause.
// The returned wait function waits for them to stop.
func (e *env) load(ctx context.Context, think time.Duration, cs ...*client) (wait func()) {
	return e.loadHolding(ctx, think, 0, cs...)
}

// loadHolding is load whose buyers also stay inside fn for hold (after
// reading the stock), so that faults catch holders mid-transaction.
func (e *env) loadHolding(ctx context.Context, think, hold time.Duration, cs ...*client) (wait func()) {
	var pause func(context.Context, *guard.Tx) error
	if hold > 0 {
		pause = func(ctx context.Context, _ *guard.Tx) error {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(hold):
				return nil
			}
		}
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c.id), uint64(time.Now().UnixNano())))
			for i := 0; ctx.Err() == nil; i++ {
				if i%4 == 3 {
					e.read(ctx, c.id)
				} else {
					c.buy(ctx, 1+r.IntN(3), 8*time.Second, pause)
				}
				select {
				case <-ctx.Done():
				case <-time.After(think):
				}
			}
		}()
	}
	return wg.Wait
}

// awaitCommit waits until an order with a token above token is committed.
func (e *env) awaitCommit(ctx context.Context, above uint64, within time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var got uint64
	err := waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		var tok *uint64
		if err := e.db.GetContext(ctx, &tok, `SELECT MAX(token) FROM orders WHERE item = ?`, e.item); err != nil {
			return false, err
		}
		if tok != nil && *tok > above {
			got = *tok
			return true, nil
		}
		return false, nil
	})
	return got, err
}

// ordersOf counts the orders of one operation.
func (e *env) ordersOf(opID string) int {
	var n int
	if err := e.db.GetContext(context.Background(), &n, `SELECT COUNT(*) FROM orders WHERE op_id = ?`, opID); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// ordersWithToken counts the orders written under one token.
func (e *env) ordersWithToken(token uint64) int {
	var n int
	if err := e.db.GetContext(context.Background(), &n, `SELECT COUNT(*) FROM orders WHERE token = ?`, token); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// logOrders logs the orders from the one before token on, to tell after a
// failure in which order they were written.
func (e *env) logOrders(t *testing.T, token uint64) {
	t.Helper()
	var rows []struct {
		OpID    string `db:"op_id"`
		Token   uint64 `db:"token"`
		Seq     int64  `db:"seq"`
		FenceOp string `db:"fence_op"`
		RowOp   string `db:"row_op"`
	}
	err := e.db.SelectContext(context.Background(), &rows, `SELECT op_id, token, seq, fence_op, row_op FROM orders
		WHERE item = ? AND seq >= COALESCE((SELECT MAX(seq) FROM orders WHERE item = ? AND token < ?), 0) ORDER BY seq LIMIT 10`, e.item, e.item, token)
	if err != nil {
		t.Logf("orders: %v", err)
		return
	}
	for _, r := range rows {
		t.Logf("order seq %d token %d op %s fence_op %s row_op %s", r.Seq, r.Token, r.OpID, r.FenceOp, r.RowOp)
	}
}

// finish takes a final read, checks the database and the history, prints
// the summary line and fails the test on any violation.
func (e *env) finish() Summary {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, ok := e.read(ctx, 0); !ok {
		e.t.Fatal("final read of the stock failed")
	}
	ops := e.h.Ops()
	sum, dbErr := VerifyDatabase(ctx, e.db, e.item, e.stock, ops)
	sum.Scenario = e.name
	checked := ops
	if dbErr == nil {
		// The database is the ground truth of which unknown buys applied.
		var ids []string
		mustNoErr(e.t, e.db.SelectContext(ctx, &ids, "SELECT op_id FROM orders WHERE item = ?", e.item), "read the orders' op ids")
		ordered := make(map[string]bool, len(ids))
		for _, id := range ids {
			ordered[id] = true
		}
		checked = ResolveUnknown(ops, ordered)
	}
	res, chkErr := CheckLinearizable(checked, e.stock, 60*time.Second, ArtifactDir, e.name)
	sum.Linearizable = res.Linearizable
	line := sum.Line()
	if err := AppendSummary(line); err != nil {
		e.t.Logf("summary file: %v", err)
	}
	fmt.Println(line)
	if dbErr != nil {
		e.t.Errorf("database check: %v", dbErr)
	}
	if chkErr != nil {
		e.t.Error(chkErr)
	}
	if !res.Linearizable {
		e.t.Errorf("history of %d operations is not linearizable; visualisation: %s", len(ops), res.Visualisation)
	}
	return sum
}

// mustNoErr fails the test on err.
func mustNoErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// queueLen is the number of waiters queued for the item in Redis.
func (e *env) queueLen(ctx context.Context, rdb *redis.Client) (int64, error) {
	names, err := redislock.KeyNamesFor(e.prefix, e.item)
	if err != nil {
		return 0, err
	}
	return rdb.ZCard(ctx, names.Queue).Result()
}

// dumpRedis logs every key of the lock's server with its TTL and contents,
// to explain a stalled queue.
func (e *env) dumpRedis(rdb *redis.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		e.t.Logf("redis dump: %v", err)
		return
	}
	for _, k := range keys {
		typ, _ := rdb.Type(ctx, k).Result()
		ttl, _ := rdb.PTTL(ctx, k).Result()
		var v any
		switch typ {
		case "hash":
			v, _ = rdb.HGetAll(ctx, k).Result()
		case "zset":
			v, _ = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "string":
			v, _ = rdb.Get(ctx, k).Result()
		}
		e.t.Logf("redis dump: %s (%s, pttl %v): %v", k, typ, ttl, v)
	}
	t, _ := rdb.Time(ctx).Result()
	e.t.Logf("redis dump: server time %v (%d ms)", t, t.UnixMilli())
}

// awaitProgress waits until a buy invoked after the history offset since
// completes with a definite answer from the database (accepted or sold
// out): the lock queue is moving again.
func (e *env) awaitProgress(ctx context.Context, since time.Duration, within time.Duration) (Op, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var got Op
	err := waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		for _, op := range e.h.Ops() {
			if op.Kind == Buy && op.Call > since && (op.Outcome == Accepted || op.Outcome == SoldOut) {
				got = op
				return true, nil
			}
		}
		return false, nil
	})
	return got, err
}

// buyHeld starts one buy of a unit by c with c's database statements held
// back in mpx (which must carry c's MySQL traffic), and waits until c is
// granted the lock. It returns the token granted, where the buy's outcome
// will arrive, and the toxic whose removal lets the statements through.
func buyHeld(ctx context.Context, t *testing.T, c *client, mpx *Proxy, within time.Duration) (uint64, <-chan Op, *Toxic) {
	t.Helper()
	hold, err := mpx.Latency(Upstream, 120_000)
	mustNoErr(t, err, "hold the database statements")
	granted := make(chan uint64, 1)
	c.onAcquired(func(tok uint64) {
		select {
		case granted <- tok:
		default:
		}
	})
	res := make(chan Op, 1)
	go func() { res <- c.buy(ctx, 1, 60*time.Second, nil) }()
	select {
	case tok := <-granted:
		return tok, res, hold
	case <-time.After(within):
		t.Fatalf("the held client was not granted the lock within %v", within)
		return 0, nil, nil
	}
}
