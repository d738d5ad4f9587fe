package galeratest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// TestOversellPreventedAcrossNodes: six instances, two per node, sell one
// SKU until it is sold out, while the SKU's Redis lock is deleted every 5 ms
// so that holders on different nodes overlap. Their transactions only meet
// at certification (row locks do not cross nodes), and the fence row that
// every claim writes makes any two of them conflict: no unit is oversold, no
// update is lost, an order exists exactly when its Do returned nil, and
// every node ends with the same stock and orders.
func TestOversellPreventedAcrossNodes(t *testing.T) {
	const stock, sku = 60, "widget"
	key := "inventory:" + sku
	w := newWorld(t, 3*time.Minute)
	if err := store.Migrate(w.ctx, w.synced[0].DB); err != nil {
		t.Fatal(err)
	}
	if err := store.Reset(w.ctx, w.synced[0], sku, stock); err != nil {
		t.Fatal(err)
	}
	_ = w.counters() // the seed is on every node
	var apps []*instance
	for i := range 6 {
		apps = append(apps, w.instance(fmt.Sprintf("app-%d", i+1), i%testenv.GaleraSize, instanceConfig{lease: 2 * time.Second}))
	}

	// Lock loss: the lock's Redis key disappears under its holders.
	rdb := testenv.Redis(t)
	names := w.lockNames(key)
	lossCtx, stopLoss := context.WithCancel(w.ctx)
	lossDone := make(chan struct{})
	go func() {
		defer close(lossDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-lossCtx.Done():
				return
			case <-tick.C:
				_ = rdb.Del(lossCtx, names.Lock).Err()
			}
		}
	}()

	type result struct {
		id  string
		err error
	}
	results := make(chan result, 1024)
	var wg sync.WaitGroup
	for b := range 18 {
		a := apps[b%len(apps)]
		wg.Go(func() {
			for o := 0; w.ctx.Err() == nil; o++ {
				id := fmt.Sprintf("b%d-o%d", b, o)
				err := a.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
					_, err := store.Purchase(ctx, tx, store.Order{ID: id, SKU: sku, Qty: 1, Instance: a.name, Token: tx.Token()}, nil)
					return err
				})
				results <- result{id, err}
				if errors.Is(err, store.ErrSoldOut) {
					return
				}
			}
		})
	}
	wg.Wait()
	stopLoss()
	<-lossDone
	close(results)

	accepted := map[string]bool{}
	var fenced, other int
	for r := range results {
		switch {
		case r.err == nil:
			accepted[r.id] = true
		case errors.Is(r.err, store.ErrSoldOut):
		case errors.Is(r.err, guard.ErrFenced):
			fenced++
		default:
			other++ // lock lost, retries exhausted: rolled back
		}
	}
	t.Logf("accepted %d, fenced %d, other failures %d", len(accepted), fenced, other)
	if len(accepted) != stock {
		t.Errorf("accepted %d orders of one unit, want exactly the stock %d", len(accepted), stock)
	}
	for i, db := range w.synced {
		tot, err := store.ReadTotals(w.ctx, db, sku, stock)
		if err != nil {
			t.Fatal(err)
		}
		if !tot.OK() || tot.Final != 0 || tot.Orders != len(accepted) {
			t.Errorf("node %d: %+v (accepted %d)", i+1, tot, len(accepted))
		}
		var ids []string
		if err := db.SelectContext(w.ctx, &ids, "SELECT order_id FROM orders WHERE sku = ?", sku); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if !accepted[id] {
				t.Errorf("node %d: order %s is recorded but its Do did not return nil", i+1, id)
			}
		}
	}
}

// TestStaleHolderFencedAcrossNodes: a holder is granted the lock and stalls
// before its transaction; meanwhile a newer holder (its grant from another
// Redis server, as after a failover that lost the first grant) commits
// through another node. When the stale holder resumes, its claim through its
// own node is rejected: Do returns guard.ErrFenced without running fn,
// whether its node had applied the newer claim yet (the claim reads it) or
// not (the newer write set aborts the stale transaction, whose retry then
// reads it).
func TestStaleHolderFencedAcrossNodes(t *testing.T) {
	w := newWorld(t, 60*time.Second)
	const key = "stale:1"
	other := testenv.RedisServer(t)
	stalled, resume := make(chan uint64, 1), make(chan struct{})
	var fencedCurrent uint64
	stale := w.instance("stale", 0, instanceConfig{guard: guard.Options{Hooks: guard.Hooks{
		OnAcquired: func(_ string, token uint64, _ time.Duration) {
			stalled <- token
			<-resume
		},
		OnFenced: func(_ string, _, current uint64) { fencedCurrent = current },
	}}})
	newer := w.instance("newer", 2, instanceConfig{redisAddr: other.Addr})

	res := make(chan error, 1)
	ran := false
	go func() {
		res <- stale.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			ran = true
			return increment(ctx, tx, "stale")
		})
	}()
	staleToken := <-stalled
	var newerToken uint64
	if err := newer.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
		newerToken = tx.Token()
		return increment(ctx, tx, "newer")
	}); err != nil {
		t.Fatalf("newer holder: %v", err)
	}
	if newerToken <= staleToken {
		t.Fatalf("newer token %d is not above the stale one %d", newerToken, staleToken)
	}
	close(resume)
	err := <-res
	if !errors.Is(err, guard.ErrFenced) {
		t.Fatalf("stale holder: %v, want guard.ErrFenced", err)
	}
	if ran {
		t.Error("the stale holder's fn ran")
	}
	if fencedCurrent != newerToken {
		t.Errorf("OnFenced saw current token %d, want %d", fencedCurrent, newerToken)
	}
	for i, n := range w.counters() {
		if n != 1 {
			t.Errorf("node %d: counter %d, want 1 (the newer holder's increment only)", i+1, n)
		}
		if rows := w.appliedRows(i, "stale"); len(rows) != 0 {
			t.Errorf("node %d: stale holder applied %+v", i+1, rows)
		}
	}
}
