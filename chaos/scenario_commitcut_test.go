package chaos

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// Scenario "commit-cut": the database path of two of three clients goes
// silent (packets dropped, nothing closed) for 4 s at a time, three
// times, each time right as a holder's fn returns, so that its COMMIT goes
// into the silence; buys have a 1.5 s ctx. A COMMIT (or any statement) on a
// silent connection never answers: Do must return by the time its ctx ends
// (plus the bounded check of the commit outcome), leave the lock to the next
// holder, and report nil only for work that committed. Histories must be
// linearizable and nothing oversold.
func TestScenarioCommitCut(t *testing.T) {
	e := newEnv(t, "commit-cut", 2000)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 120*time.Second)
	// A holder behind a cut keeps the fence row locked until the cut heals
	// and its connection closes; the others give up waiting for it after 3 s
	// and retry or fail, which the checks must absorb.
	params := map[string]string{"innodb_lock_wait_timeout": "3"}
	mpx := NewProxy(t, "cut-mysql", e.mysqlAddr())
	cutDB := e.open(e.dsnVia(mpx.Addr, params))
	direct := e.open(e.dsnVia("", params))
	cs := []*client{
		e.newClient(srv.Client(), cutDB, fastLocks),
		e.newClient(srv.Client(), cutDB, fastLocks),
		e.newClient(srv.Client(), direct, fastLocks),
	}
	const timeout = 1500 * time.Millisecond
	var armed atomic.Bool
	cuts := make(chan []*Toxic, 1)
	// Cutting clients cut their own path as their fn returns, when armed.
	cutAtCommit := func(ctx context.Context, tx *guardTx) error {
		if !armed.CompareAndSwap(true, false) {
			return nil
		}
		up, err := mpx.Blackhole(Upstream)
		if err != nil {
			return err
		}
		down, err := mpx.Blackhole(Downstream)
		if err != nil {
			return err
		}
		cuts <- []*Toxic{up, down}
		return nil
	}
	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.loadWith(lctx, 10*time.Millisecond, timeout, nil, cs[2])
	waitCut := e.loadAfterFn(lctx, 10*time.Millisecond, timeout, cutAtCommit, cs[0], cs[1])
	defer func() { stop(); waitLoad(); waitCut() }()

	for round := 0; round < 3; round++ {
		time.Sleep(500 * time.Millisecond)
		armed.Store(true)
		var xs []*Toxic
		select {
		case xs = <-cuts:
		case <-time.After(20 * time.Second):
			t.Fatal("no cutting client reached COMMIT")
		}
		// Longer than a buy's ctx: a COMMIT that its ctx cannot cut short
		// would still be waiting when the ctx ends.
		time.Sleep(4 * time.Second)
		for _, x := range xs {
			mustNoErr(t, x.Remove(), "heal")
		}
	}
	since := e.h.Since()
	_, err := e.awaitProgress(ctx, since, 15*time.Second)
	mustNoErr(t, err, "buying after the last cut")
	stop()
	waitLoad()
	waitCut()

	var longest time.Duration
	for _, op := range e.h.Ops() {
		if op.Kind == Buy {
			longest = max(longest, op.Return-op.Call)
		}
		// Return is when Do returned, whatever the outcome.
		if op.Kind == Buy && op.Return-op.Call > timeout+1500*time.Millisecond {
			t.Errorf("buy %s took %v with a %v ctx (%s)", op.ID, op.Return-op.Call, timeout, op.Err)
		}
	}
	t.Logf("longest buy: %v (ctx %v)", longest, timeout)
	e.finish()
}

// loadAfterFn is loadWith whose buys run after, at the end of fn once the
// buy's own writes are made, before Do commits.
func (e *env) loadAfterFn(ctx context.Context, think, timeout time.Duration, after func(context.Context, *guardTx) error, cs ...*client) (wait func()) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p := e.h.Invoke(c.id, Buy, 1)
				bctx, cancel := context.WithTimeout(ctx, timeout)
				var token uint64
				fn := BuyFn(e.item, p.ID(), 1, nil)
				err := c.g.Do(bctx, e.item, func(ctx context.Context, tx *guardTx) error {
					token = tx.Token()
					if err := fn(ctx, tx); err != nil {
						return err
					}
					return after(ctx, tx)
				})
				cancel()
				p.Return(Classify(err), 0, token, err)
				select {
				case <-ctx.Done():
				case <-time.After(think):
				}
			}
		}()
	}
	return wg.Wait
}
