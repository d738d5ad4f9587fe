package redfence_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const sku = "widget"

// lockKey names the SKU's lock and its fence row.
var lockKey = "inventory:" + sku

// world is one test's servers: a private database with the inventory schema
// and a Redis key prefix of its own.
type world struct {
	t      *testing.T
	ctx    context.Context
	dsn    string
	prefix string
	admin  *sqlx.DB
}

func newWorld(t *testing.T, stock int) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	_ = testenv.Redis(t) // fails loudly when Redis is down
	admin, dsn := testenv.MySQLWithDSN(t)
	if err := store.Migrate(ctx, admin.DB); err != nil {
		t.Fatal(err)
	}
	if err := store.Reset(ctx, admin, sku, stock); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ctx: ctx, dsn: dsn, prefix: testenv.Prefix(t), admin: admin}
}

// app is one simulated application instance: its own Redis client, Locker,
// database pool and Guard.
type app struct {
	name   string
	rdb    *redis.Client
	locker *redislock.Locker
	db     *sqlx.DB
	guard  *guard.Guard
	pause  *pauser
}

func (w *world) app(name string, lease time.Duration, hooks guard.Hooks) *app {
	w.t.Helper()
	a := &app{name: name, pause: &pauser{}}
	a.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	a.rdb.AddHook(a.pause)
	a.locker = redislock.New(a.rdb, &redislock.Options{Prefix: w.prefix, LeaseTTL: lease})
	db, err := sqlx.Open("mysql", w.dsn)
	if err != nil {
		w.t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	a.db = db
	a.guard = guard.New(a.locker, db, &guard.Options{Hooks: hooks})
	w.t.Cleanup(func() {
		_ = a.locker.Close()
		_ = a.rdb.Close()
		_ = a.db.Close()
	})
	return a
}

// buy places one order through guard.Do; between runs between the read of
// the stock and its write.
func (a *app) buy(ctx context.Context, id string, qty int, between func(ctx context.Context)) error {
	return a.guard.Do(ctx, lockKey, func(ctx context.Context, tx *guard.Tx) error {
		_, err := store.Purchase(ctx, tx, store.Order{ID: id, SKU: sku, Qty: qty, Instance: a.name, Token: tx.Token()}, between)
		return err
	})
}

// checkTotals asserts the invariants every scenario must keep: nothing
// oversold and no lost update (final stock == initial - units in accepted
// orders), and returns the totals.
func (w *world) checkTotals(initial int) store.Totals {
	w.t.Helper()
	tot, err := store.ReadTotals(w.ctx, w.admin, sku, initial)
	if err != nil {
		w.t.Fatal(err)
	}
	if tot.Oversold != 0 {
		w.t.Errorf("oversold %d units: %+v", tot.Oversold, tot)
	}
	if tot.Final != initial-tot.Sold {
		w.t.Errorf("lost update: final stock %d != initial %d - sold %d (%+v)", tot.Final, initial, tot.Sold, tot)
	}
	return tot
}

// pauser freezes an app's Redis traffic, lock renewals included, as a
// stop-the-world pause of its process would.
type pauser struct {
	mu     sync.Mutex
	paused chan struct{} // non-nil while paused; closed on resume
}

func (p *pauser) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
}

func (p *pauser) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

func (p *pauser) wait(ctx context.Context) error {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pauser) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := p.wait(ctx); err != nil {
			return nil, err
		}
		return next(ctx, network, addr)
	}
}

func (p *pauser) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := p.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (p *pauser) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := p.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// TestInstancesHammerOneSKU: four application instances, 48 buyers, orders
// of 1 to 3 units until sold out. Exactly the stock is sold, every order is
// accounted for, nothing fails.
func TestInstancesHammerOneSKU(t *testing.T) {
	const stock = 120
	w := newWorld(t, stock)
	apps := make([]*app, 4)
	for i := range apps {
		apps[i] = w.app(fmt.Sprintf("app-%d", i+1), 2*time.Second, guard.Hooks{})
	}
	var accepted, units atomic.Int64
	errs := make(chan error, 48)
	var wg sync.WaitGroup
	for b := range 48 {
		a := apps[b%len(apps)]
		wg.Go(func() {
			for o := 0; ; o++ {
				qty := 1 + (b+o)%3
				err := a.buy(w.ctx, fmt.Sprintf("b%d-o%d", b, o), qty, nil)
				var so *store.SoldOutError
				switch {
				case err == nil:
					accepted.Add(1)
					units.Add(int64(qty))
				case errors.As(err, &so):
					if so.Available == 0 {
						return
					}
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("order failed: %v", err)
	}
	tot := w.checkTotals(stock)
	if tot.Sold != stock || tot.Final != 0 {
		t.Errorf("the stock was not sold exactly: %+v", tot)
	}
	if int64(tot.Orders) != accepted.Load() || int64(tot.Sold) != units.Load() {
		t.Errorf("database has %d orders / %d units; buyers were told %d / %d", tot.Orders, tot.Sold, accepted.Load(), units.Load())
	}
}

// TestHolderPausedPastLease: a holder reads the stock, then its whole
// instance freezes (Redis traffic and the holder itself) for four leases.
// Another instance is granted the lock while it is frozen and places orders.
// When the frozen holder wakes up and writes the stock it read, nothing is
// oversold and no sale is lost: its Do fails with ErrLockLost, or, if it
// committed, the other instance's claims waited on the fence row for that
// commit and read its write.
func TestHolderPausedPastLease(t *testing.T) {
	const stock, lease, pause = 20, 150 * time.Millisecond, 600 * time.Millisecond
	w := newWorld(t, stock)
	slow := w.app("slow", lease, guard.Hooks{})
	var firstGrant atomic.Int64 // unix ns of the fast instance's first grant
	fast := w.app("fast", lease, guard.Hooks{OnAcquired: func(string, uint64, time.Duration) {
		firstGrant.CompareAndSwap(0, time.Now().UnixNano())
	}})

	read := make(chan struct{})
	var woke time.Time
	slowErr := make(chan error, 1)
	go func() {
		first := true
		slowErr <- slow.buy(w.ctx, "slow-1", 5, func(context.Context) {
			if first { // a retried attempt does not pause again
				first = false
				slow.pause.freeze()
				close(read)
				time.Sleep(pause) // the pause itself, deaf to everything
				woke = time.Now()
				slow.pause.resume()
			}
		})
	}()
	<-read
	for i := range 3 {
		if err := fast.buy(w.ctx, fmt.Sprint("fast-", i), 4, nil); err != nil {
			t.Fatalf("fast order %d: %v", i, err)
		}
	}
	err := <-slowErr
	t.Logf("frozen holder's Do: %v", err)
	if granted := time.Unix(0, firstGrant.Load()); !granted.Before(woke) {
		t.Errorf("the other instance got the lock %v after the frozen holder woke: the lease did not run out", granted.Sub(woke))
	}
	if err != nil && !errors.Is(err, guard.ErrLockLost) {
		t.Errorf("frozen holder: %v, want nil or ErrLockLost", err)
	}
	tot := w.checkTotals(stock)
	want := 12
	if err == nil {
		want += 5
	}
	if tot.Sold != want {
		t.Errorf("sold %d units, want %d (%+v)", tot.Sold, want, tot)
	}
}

// TestGrantLostInRedis: while a holder is inside fn, the lock's keys vanish
// from Redis as they would after a failover to a replica that never saw
// them. A second instance is granted the lock at once; the database still
// serialises the two transactions on the fence row, so the second reads the
// first one's write (or the first one is rolled back): no lost update.
func TestGrantLostInRedis(t *testing.T) {
	const stock = 10
	w := newWorld(t, stock)
	rdb := testenv.Redis(t)
	acquiredB := make(chan struct{})
	first := w.app("first", 10*time.Second, guard.Hooks{})
	second := w.app("second", 10*time.Second, guard.Hooks{OnAcquired: func(string, uint64, time.Duration) { close(acquiredB) }})

	inside := make(chan struct{})
	proceed := make(chan struct{})
	firstErr := make(chan error, 1)
	var once sync.Once
	go func() {
		firstErr <- first.buy(w.ctx, "first-1", 3, func(context.Context) {
			once.Do(func() { close(inside); <-proceed })
		})
	}()
	<-inside
	// The failover: every key of the lock is gone, token counter included.
	keys, err := rdb.Keys(w.ctx, w.prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("lock keys: %v %v", keys, err)
	}
	if err := rdb.Del(w.ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	secondErr := make(chan error, 1)
	go func() { secondErr <- second.buy(w.ctx, "second-1", 4, nil) }()
	<-acquiredB // two holders now; the second one's claim waits on the fence row
	close(proceed)

	e1, e2 := <-firstErr, <-secondErr
	t.Logf("first: %v; second: %v", e1, e2)
	if e2 != nil {
		t.Errorf("second holder: %v", e2)
	}
	if e1 != nil && !errors.Is(e1, guard.ErrLockLost) {
		t.Errorf("first holder: %v, want nil or ErrLockLost", e1)
	}
	tot := w.checkTotals(stock)
	want := 4
	if e1 == nil {
		want += 3
	}
	if tot.Sold != want {
		t.Errorf("sold %d, want %d (%+v)", tot.Sold, want, tot)
	}
}

// TestGrantLostBeforeClaim: the lock's keys vanish from Redis (a failover)
// between a holder's grant and its first statement. Another instance is
// granted the lock and sells; the first holder, unaware (its lease is long),
// then claims with its older token. The database rejects it: Do returns
// ErrFenced (and fence.ErrStale), fn never runs, and the next Do of that
// instance goes through with a fresh token.
func TestGrantLostBeforeClaim(t *testing.T) {
	const stock = 10
	w := newWorld(t, stock)
	rdb := testenv.Redis(t)
	second := w.app("second", 10*time.Second, guard.Hooks{})
	var secondErr error
	var fenced atomic.Int64
	armed := true
	first := w.app("first", 10*time.Second, guard.Hooks{
		OnAcquired: func(string, uint64, time.Duration) {
			if !armed {
				return
			}
			armed = false
			keys, err := rdb.Keys(w.ctx, w.prefix+"*").Result()
			if err == nil && len(keys) > 0 {
				err = rdb.Del(w.ctx, keys...).Err()
			}
			if err != nil {
				secondErr = err
				return
			}
			secondErr = second.buy(w.ctx, "second-1", 4, nil)
		},
		OnFenced: func(string, uint64, uint64) { fenced.Add(1) },
	})
	fnRan := false
	err := first.guard.Do(w.ctx, lockKey, func(ctx context.Context, tx *guard.Tx) error {
		fnRan = true
		return nil
	})
	if secondErr != nil {
		t.Fatalf("second holder: %v", secondErr)
	}
	var stale *fence.StaleError
	if !errors.Is(err, guard.ErrFenced) || !errors.Is(err, fence.ErrStale) || !errors.As(err, &stale) {
		t.Fatalf("first holder after the failover: %v, want ErrFenced wrapping *fence.StaleError", err)
	}
	if fnRan || fenced.Load() != 1 {
		t.Fatalf("fn ran: %v; OnFenced calls: %d", fnRan, fenced.Load())
	}
	if err := first.buy(w.ctx, "first-2", 3, nil); err != nil {
		t.Fatalf("the next Do after a fenced one: %v", err)
	}
	if tot := w.checkTotals(stock); tot.Sold != 7 || tot.Orders != 2 {
		t.Errorf("sold %d in %d orders, want 7 in 2 (%+v)", tot.Sold, tot.Orders, tot)
	}
}

// TestDelayedWriteFromStaleHolder: a holder takes the lock and stalls
// before writing; its lease runs out, a newer holder sells and commits. When
// the stale holder's write finally arrives, with its old token, the
// database rejects it: through guard.Do (ErrFenced, or ErrLockLost if the
// loss was seen first; fn never runs), and through a bare fence.Claim in a
// hand-written transaction (fence.ErrStale, nothing written).
func TestDelayedWriteFromStaleHolder(t *testing.T) {
	const stock, lease = 10, 150 * time.Millisecond
	w := newWorld(t, stock)
	fresh := w.app("fresh", lease, guard.Hooks{})

	t.Run("guard", func(t *testing.T) {
		var staleApp *app
		var freshErr error
		staleApp = w.app("stale", lease, guard.Hooks{OnAcquired: func(string, uint64, time.Duration) {
			// Stalled between taking the lock and its first statement, long
			// enough for another instance to take the lock and commit.
			staleApp.pause.freeze()
			freshErr = fresh.buy(w.ctx, "fresh-1", 2, nil)
			staleApp.pause.resume()
		}})
		fnRan := false
		err := staleApp.guard.Do(w.ctx, lockKey, func(ctx context.Context, tx *guard.Tx) error {
			fnRan = true
			_, err := store.Purchase(ctx, tx, store.Order{ID: "stale-1", SKU: sku, Qty: 1, Instance: "stale", Token: tx.Token()}, nil)
			return err
		})
		t.Logf("stale Do: %v", err)
		if freshErr != nil {
			t.Fatalf("fresh holder: %v", freshErr)
		}
		if !errors.Is(err, guard.ErrFenced) && !errors.Is(err, guard.ErrLockLost) {
			t.Errorf("stale Do: %v, want ErrFenced or ErrLockLost", err)
		}
		if errors.Is(err, guard.ErrFenced) && !errors.Is(err, fence.ErrStale) {
			t.Errorf("ErrFenced without fence.ErrStale: %v", err)
		}
		if fnRan {
			t.Error("fn ran for a stale holder")
		}
		if tot := w.checkTotals(stock); tot.Sold != 2 {
			t.Errorf("sold %d, want 2 (%+v)", tot.Sold, tot)
		}
	})

	t.Run("fence", func(t *testing.T) {
		staleApp := w.app("stale-raw", lease, guard.Hooks{})
		lk, err := staleApp.locker.Lock(w.ctx, lockKey)
		if err != nil {
			t.Fatal(err)
		}
		staleApp.pause.freeze() // renewals stop; the lease runs out
		if err := fresh.buy(w.ctx, "fresh-2", 3, nil); err != nil {
			t.Fatalf("fresh holder: %v", err)
		}
		staleApp.pause.resume()

		// The delayed write, as code without guard.Do would make it.
		tx, err := staleApp.db.BeginTxx(w.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = fence.Claim(w.ctx, tx, staleApp.guard.FenceResource(lockKey), lk.Token(), lk.Owner())
		var stale *fence.StaleError
		if !errors.As(err, &stale) || stale.Current <= lk.Token() {
			_ = tx.Rollback()
			t.Fatalf("claim with the stale token %d: %v", lk.Token(), err)
		}
		_ = tx.Rollback()
		_ = lk.Unlock(w.ctx) // ErrNotHeld or ErrLost: the lock moved on
		if tot := w.checkTotals(stock); tot.Sold != 5 {
			t.Errorf("sold %d, want 5 (%+v)", tot.Sold, tot)
		}
	})
}
