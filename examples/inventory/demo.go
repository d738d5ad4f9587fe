package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// The modes, in the order a default run shows them.
const (
	modeUnsafe    = "unsafe"
	modeRedisOnly = "redis-only"
	modeGuard     = "guard"
	// modeBatched is guard with Options.Batch.Max: the buyers of one
	// instance that queue behind its holder share one lock turn and one
	// transaction.
	modeBatched = "batched"
)

// batchSize is Options.Batch.Max of the batched mode.
const batchSize = 16

var allModes = []string{modeUnsafe, modeRedisOnly, modeGuard, modeBatched}

// claimsSafety reports whether a mode promises never to oversell; the
// program exits non-zero when such a mode does.
func claimsSafety(mode string) bool { return mode == modeGuard || mode == modeBatched }

// demoConfig is one run of the load driver.
type demoConfig struct {
	modes     []string
	buyers    int           // concurrent buyers, spread over the instances
	instances int           // simulated application instances
	stock     int           // initial stock of the SKU
	orders    int           // orders each buyer places (until sold out)
	qty       int           // units per order
	poolSize  int           // database connections per instance
	sku       string        // the one hot SKU
	prefix    string        // of the Redis keys
	pause     time.Duration // stall injected into one holder at each stall point (0: none)
	failover  bool          // lose one holder's grant in Redis, as a failover would
	lease     time.Duration // lock lease of the instances' Lockers
	work      time.Duration // time a purchase spends between reading and writing the stock
	timeout   time.Duration // bound on each mode

	outage       string        // "" (none), outageKill or outagePause: take the guard mode's Redis away
	outageAfter  int           // accepted orders before the outage (0: a quarter of what the stock allows)
	outageLength time.Duration // how long Redis stays away

	startServers bool   // start the servers that do not answer
	where        string // where the servers are, for the report
}

// modeResult is what one mode did: the database's totals and what the
// buyers saw.
type modeResult struct {
	mode     string
	totals   store.Totals
	elapsed  time.Duration
	injected []string
	outage   *redisOutage // the guard mode's Redis outage, or nil
	switches [2]int64     // Guards' switches to database mode and back to Redis

	accepted, soldOut, fenced, lockLost, lostAtUnlock, failed atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration // of accepted orders, from first try to success
	errs      []string        // the first few unexpected errors
}

func (r *modeResult) addLatency(d time.Duration) {
	r.mu.Lock()
	r.latencies = append(r.latencies, d)
	r.mu.Unlock()
}

func (r *modeResult) addErr(err error) {
	r.failed.Add(1)
	r.mu.Lock()
	if len(r.errs) < 3 {
		r.errs = append(r.errs, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	r.mu.Unlock()
}

// percentile returns the p-th percentile (0 < p <= 100) of the accepted
// orders' latencies, or 0 when there are none.
func (r *modeResult) percentile(p float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return percentile(r.latencies, p)
}

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	// Nearest rank: the smallest value with at least p% of values at or below it.
	rank := int(float64(len(s))*p/100 + 0.999999)
	return s[min(max(rank, 1), len(s))-1]
}

// throughput is accepted orders per second of the mode's wall time.
func (r *modeResult) throughput() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.accepted.Load()) / r.elapsed.Seconds()
}

// safe reports whether the mode, if it claims safety, kept it.
func (r *modeResult) safe() bool {
	return !claimsSafety(r.mode) || (r.totals.OK() && r.failed.Load() == 0)
}

// runDemo runs every mode of cfg against the servers and returns their
// results; progress goes to progress.
func runDemo(ctx context.Context, cfg demoConfig, srv servers, progress io.Writer) ([]*modeResult, error) {
	if err := checkRedis(ctx, srv); err != nil {
		return nil, err
	}
	admin, err := openDatabase(ctx, srv, 2)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	insts, err := newInstances(cfg.instances, instanceConfig{servers: srv, prefix: cfg.prefix, poolSize: cfg.poolSize, lease: cfg.lease})
	if err != nil {
		return nil, err
	}
	defer closeInstances(insts)

	runID := randomHex(4)
	var results []*modeResult
	for _, mode := range cfg.modes {
		if err := store.Reset(ctx, admin, cfg.sku, cfg.stock); err != nil {
			return results, err
		}
		mctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		var r *modeResult
		if mode == modeGuard && cfg.outage != "" {
			r, err = runOutageMode(mctx, cfg, srv, runID, progress)
		} else {
			r = runMode(mctx, cfg, mode, runID, insts, nil, progress)
		}
		cancel()
		if err != nil {
			return results, err
		}
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		// Read with a fresh context: the mode's may have run out.
		tctx, tcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		r.totals, err = store.ReadTotals(tctx, admin, cfg.sku, cfg.stock)
		tcancel()
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	return results, nil
}

// runOutageMode runs the guard mode on instances of its own, whose Guards
// fall back on the database, against a redis-server it starts, and takes that
// server away while the mode runs (cfg.outage).
func runOutageMode(ctx context.Context, cfg demoConfig, srv servers, runID string, progress io.Writer) (*modeResult, error) {
	p, err := startOutageRedis(ctx)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	own := srv
	own.redisAddr, own.redisStarted = p.Addr, processDesc(p)
	insts, err := newInstances(cfg.instances, instanceConfig{servers: own, prefix: cfg.prefix, poolSize: cfg.poolSize,
		lease: cfg.lease, fallback: true})
	if err != nil {
		return nil, err
	}
	defer closeInstances(insts)
	after := cfg.outageAfter
	if after == 0 {
		after = max(1, cfg.stock/cfg.qty/4)
	}
	out := newRedisOutage(cfg.outage, int64(after), int64(cfg.stock/cfg.qty), cfg.outageLength, p, progress)
	return runMode(ctx, cfg, modeGuard, runID, insts, out, progress), nil
}

// runMode lets cfg.buyers buyers, spread over insts, place their orders
// concurrently in one mode, while out, when not nil, takes Redis away.
func runMode(ctx context.Context, cfg demoConfig, mode, runID string, insts []*instance, out *redisOutage, progress io.Writer) *modeResult {
	r := &modeResult{mode: mode, outage: out}
	var st *stalls
	if mode != modeUnsafe {
		st = newStalls(cfg.pause, cfg.lease, cfg.failover, cfg.prefix, cfg.stock)
	}
	for _, inst := range insts {
		inst.onAcquired = func() { st.lockTaken(ctx, inst, lockKey(cfg.sku)) }
		if out != nil {
			inst.onDone = out.served
		}
	}
	defer func() {
		for _, inst := range insts {
			inst.onAcquired, inst.onDone = nil, nil
		}
	}()
	var outageDone sync.WaitGroup
	modeDone := make(chan struct{})
	if out != nil {
		outageDone.Go(func() { out.run(modeDone) })
	}

	stopProgress := startProgress(progress, mode, cfg.buyers*cfg.orders, r)
	start := time.Now()
	var wg sync.WaitGroup
	for b := range cfg.buyers {
		inst := insts[b%len(insts)]
		wg.Go(func() {
			for o := range cfg.orders {
				order := store.Order{
					ID:       fmt.Sprintf("%s-%s-b%d-o%d", runID, mode, b, o),
					SKU:      cfg.sku,
					Qty:      cfg.qty,
					Instance: inst.name,
				}
				if soldOut := buy(ctx, cfg, mode, inst, order, st, r); soldOut || ctx.Err() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	close(modeDone)
	outageDone.Wait()
	stopProgress()
	r.injected = st.report()
	if out != nil {
		r.injected = append(r.injected, out.report())
	}
	for _, inst := range insts {
		r.switches[0] += inst.toDatabase.Load()
		r.switches[1] += inst.toRedis.Load()
	}
	return r
}

// maxTries bounds the tries of one order whose attempts were rejected
// without effect (fenced, or lock lost and rolled back).
const maxTries = 5

// buy places one order, trying again when an attempt was rolled back, and
// records the outcome in r. It reports whether the SKU was sold out.
func buy(ctx context.Context, cfg demoConfig, mode string, inst *instance, o store.Order, st *stalls, r *modeResult) (soldOut bool) {
	start := time.Now()
	for try := 1; ; try++ {
		err := place(ctx, cfg, mode, inst, o, st, r)
		switch {
		case err == nil:
			r.outage.accepted(r.accepted.Add(1))
			r.addLatency(time.Since(start))
			return false
		case errors.Is(err, store.ErrSoldOut):
			r.soldOut.Add(1)
			return true
		case errors.Is(err, guard.ErrFenced):
			r.fenced.Add(1)
		case errors.Is(err, guard.ErrLockLost):
			r.lockLost.Add(1)
		default:
			if ctx.Err() == nil {
				r.addErr(err)
			}
			return false
		}
		if try == maxTries {
			r.addErr(fmt.Errorf("order %s: gave up after %d rolled-back tries: %w", o.ID, try, err))
			return false
		}
	}
}

// place runs one attempt of an order in the given mode.
func place(ctx context.Context, cfg demoConfig, mode string, inst *instance, o store.Order, st *stalls, r *modeResult) error {
	between := func(context.Context) {
		st.stockRead(inst)
		time.Sleep(cfg.work)
	}
	switch mode {
	case modeUnsafe:
		// Read then write, no lock: two buyers that read the same stock both
		// sell from it. Plain autocommit statements, as such code usually
		// runs; a transaction would not help, its plain read takes no lock.
		_, err := store.Purchase(ctx, inst.db, o, between)
		return err
	case modeRedisOnly:
		// A lock without a fence: correct until a holder stalls past its
		// lease, then two holders run at once and the stale one's write wins.
		lk, err := inst.locker.Lock(ctx, lockKey(o.SKU))
		if err != nil {
			return err
		}
		st.lockTaken(ctx, inst, lockKey(o.SKU))
		o.Token = lk.Token()
		_, err = store.Purchase(ctx, inst.db, o, between)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if uerr := lk.Unlock(uctx); errors.Is(uerr, redislock.ErrLost) || errors.Is(uerr, redislock.ErrNotHeld) {
			// Noticed only now, after the write was committed.
			r.lostAtUnlock.Add(1)
		} else if uerr != nil && err == nil {
			err = uerr
		}
		return err
	case modeGuard, modeBatched:
		g := inst.guard
		if mode == modeBatched {
			g = inst.batched
		}
		return g.Do(ctx, lockKey(o.SKU), func(ctx context.Context, tx *guard.Tx) error {
			o.Token = tx.Token()
			_, err := store.Purchase(ctx, tx, o, between)
			return err
		})
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
