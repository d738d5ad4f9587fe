package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// Scenario "redis-outage": the inventory workload on Guards with the
// database fallback, while Redis is killed for about ten seconds and then
// restarted, once with its data (append-only file) and once empty. Buying
// must go on in database mode, with histories linearizable, nothing
// oversold, no Do blocked past its ctx, and a throughput during the outage
// of at least half that of plain SELECT … FOR UPDATE transactions run by
// the same clients in the same test.
func TestScenarioRedisOutage(t *testing.T) {
	for _, v := range []struct {
		name  string
		extra []string
	}{
		{"with-data", []string{"--appendonly", "yes", "--appendfsync", "always"}},
		{"empty", nil},
	} {
		t.Run(v.name, func(t *testing.T) { runRedisOutage(t, "redis-outage-"+v.name, v.extra) })
	}
}

const (
	outageClients = 3
	outageThink   = 10 * time.Millisecond
	outageTimeout = 4 * time.Second // each buy's ctx
	outageLength  = 10 * time.Second
)

func runRedisOutage(t *testing.T, name string, redisArgs []string) {
	e := newEnv(t, name, 1_000_000)
	srv := testenv.RedisServer(t, redisArgs...)
	ctx := ctxT(t, 120*time.Second)

	// The baseline: plain SELECT … FOR UPDATE transactions on an item of
	// their own, by the same number of clients with the same think time.
	plain := plainThroughput(t, ctx, e, 3*time.Second)

	var modes atomic.Int64
	var cs []*client
	for range outageClients {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: 1})
		t.Cleanup(func() { _ = rdb.Close() })
		c := e.newClient(rdb, e.db, fastLocks)
		c.g = guard.New(c.locker, e.db, &guard.Options{
			MaxAttempts: 2, UnlockTimeout: 2 * time.Second,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			Fallback: guard.FallbackDatabase, FallbackAfter: 2, FallbackRetry: 500 * time.Millisecond,
			FallbackProbeAfter: 100 * time.Millisecond, FallbackProbeTimeout: 150 * time.Millisecond,
			Hooks: guard.Hooks{OnModeChange: func(from, to guard.Mode) { modes.Add(1) }},
		})
		cs = append(cs, c)
	}
	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.loadWithTimeout(lctx, outageThink, outageTimeout, cs...)
	defer func() { stop(); waitLoad() }()

	time.Sleep(1500 * time.Millisecond) // normal buying
	srv.Kill()
	down := e.h.Since()
	time.Sleep(outageLength)
	srv.Restart()
	up := e.h.Since()
	time.Sleep(2 * time.Second) // back to Redis mode
	stop()
	waitLoad()

	ops := e.h.Ops()
	during, late := 0, 0
	for _, op := range ops {
		if op.Kind != Buy {
			continue
		}
		if op.Outcome == Accepted && op.Call >= down && op.Return <= up {
			during++
		}
		// Do returns by the time its ctx ends (plus the bounded settling of
		// a COMMIT cut short by it).
		if op.Return-op.Call > outageTimeout+1500*time.Millisecond {
			late++
			t.Errorf("buy %s took %v with a %v ctx", op.ID, op.Return-op.Call, outageTimeout)
		}
	}
	rate := float64(during) / (up - down).Seconds()
	t.Logf("%s: plain SELECT … FOR UPDATE %.0f buys/s; guarded during the outage %.0f buys/s (%.2fx); mode changes %d",
		name, plain, rate, rate/plain, modes.Load())
	if rate < plain/2 {
		t.Errorf("throughput during the outage %.0f/s is below half of plain SELECT … FOR UPDATE's %.0f/s", rate, plain)
	}
	if modes.Load() < int64(outageClients) {
		t.Errorf("%d mode changes, want every client to switch to the database and back", modes.Load())
	}
	if late != 0 {
		t.Errorf("%d buys outlived their ctx", late)
	}
	e.finish()
}

// loadWithTimeout is load with a ctx of timeout for each buy.
func (e *env) loadWithTimeout(ctx context.Context, think, timeout time.Duration, cs ...*client) (wait func()) {
	return e.loadWith(ctx, think, timeout, nil, cs...)
}

// loadWith runs buyers on cs until ctx ends, each buy bounded by timeout
// and paused inside fn by pause (when not nil), every fourth operation a
// read of the stock.
func (e *env) loadWith(ctx context.Context, think, timeout time.Duration, pause func(context.Context, *guardTx) error, cs ...*client) (wait func()) {
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
					c.buy(ctx, 1+r.IntN(3), timeout, pause)
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

// guardTx names guard.Tx for the pause functions of the loads.
type guardTx = guard.Tx

// plainThroughput runs outageClients loops of plain SELECT … FOR UPDATE
// buys (and reads, in the guarded load's mix) on an item of their own for d,
// and returns the buys per second. A run in which the server failed to
// answer a connection (a busy shared machine) is measured once more.
func plainThroughput(t *testing.T, ctx context.Context, e *env, d time.Duration) float64 {
	t.Helper()
	if _, err := e.db.ExecContext(ctx, insertItem, plainItem, 1_000_000); err != nil {
		t.Fatal(err)
	}
	rate, err := plainRun(ctx, e, d)
	var ne net.Error
	if errors.As(err, &ne) {
		t.Log("plain SELECT … FOR UPDATE baseline: the server failed to answer a connection; measuring again")
		rate, err = plainRun(ctx, e, d)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rate
}

// plainItem is the item of plainThroughput's buys.
const plainItem = "sku-plain"

// plainRun is one run of plainThroughput: an error when a buy failed or
// none was made.
func plainRun(ctx context.Context, e *env, d time.Duration) (float64, error) {
	const item = plainItem
	var n, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for i := range outageClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; rctx.Err() == nil; j++ {
				// The same mix as the guarded load: every fourth operation
				// reads the stock.
				if j%4 == 3 {
					_, _ = ReadStock(rctx, e.db, item)
				} else if err := plainBuy(rctx, e, item, fmt.Sprintf("plain-%d-%d", i, j)); err == nil {
					n.Add(1)
				} else if rctx.Err() == nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
				select {
				case <-rctx.Done():
				case <-time.After(outageThink):
				}
			}
		}()
	}
	wg.Wait()
	// The baseline must measure buys, not errors: a broken baseline would
	// make any guarded throughput look good enough.
	if failed.Load() > 0 || n.Load() == 0 {
		var err error
		if p := firstErr.Load(); p != nil {
			err = *p
		}
		return 0, fmt.Errorf("plain SELECT … FOR UPDATE baseline: %d buys, %d failed (first: %w)", n.Load(), failed.Load(), err)
	}
	return float64(n.Load()) / d.Seconds(), nil
}

func plainBuy(ctx context.Context, e *env, item, opID string) error {
	tx, err := e.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var stock int
	var seq int64
	if err := tx.QueryRowxContext(ctx, selectItem+" FOR UPDATE", item).Scan(&stock, &seq); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, updateItem, stock-1, seq+1, item); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, insertOrder, opID, item, 1, 1, seq+1, stock-1, "plain", item, item); err != nil {
		return err
	}
	return tx.Commit()
}
