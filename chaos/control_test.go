package chaos

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// The checks must have teeth against the real database: the same workload
// run WITHOUT the lock and the fence (plain transactions racing on the same
// row) loses updates, and both the database check and the linearizability
// check must say so.
func TestChecksCatchUnguardedBuys(t *testing.T) {
	e := newEnv(t, "control-unguarded", 1000)
	ctx := ctxT(t, 60*time.Second)
	pause := func(ctx context.Context, _ *guard.Tx) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Millisecond):
			return nil
		}
	}
	var wg sync.WaitGroup
	for c := 1; c <= 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				if i%3 == 2 {
					e.read(ctx, c)
					continue
				}
				p := e.h.Invoke(c, Buy, 1)
				tx, err := e.db.BeginTxx(ctx, nil)
				if err != nil {
					p.Return(Unknown, 0, 0, err)
					continue
				}
				err = BuyFn(e.item, p.ID(), 1, pause)(ctx, &guard.Tx{Tx: tx})
				if err == nil {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
				out := Accepted
				if err != nil {
					out = Unknown
				}
				p.Return(out, 0, 0, err)
			}
		}()
	}
	wg.Wait()
	e.read(ctx, 0)
	ops := e.h.Ops()
	if _, err := VerifyDatabase(ctx, e.db, e.item, e.stock, ops); err == nil {
		t.Error("the database check found nothing wrong with unguarded concurrent buys")
	} else {
		t.Logf("database check, as expected: %.300v", err)
	}
	res, err := CheckLinearizable(ops, e.stock, 30*time.Second, t.TempDir(), "control")
	if err != nil {
		t.Fatal(err)
	}
	if res.Linearizable {
		t.Error("unguarded concurrent buys (lost updates) were judged linearizable")
	}
}
