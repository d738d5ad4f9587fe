package chaos

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
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

// The fence row must name the last committed order. A transaction that
// claimed the row with a newer token and committed without the order it
// should have written with it (its write went elsewhere, or was lost) leaves
// orders whose tokens still increase and add up: only the fence row tells.
func TestChecksCatchFenceRowNotNamingLastOrder(t *testing.T) {
	e := newEnv(t, "control-fence-row", 10)
	ctx := ctxT(t, 30*time.Second)
	inTx := func(f func(tx *sqlx.Tx) error) {
		t.Helper()
		tx, err := e.db.BeginTxx(ctx, nil)
		mustNoErr(t, err, "begin")
		if err := f(tx); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		mustNoErr(t, tx.Commit(), "commit")
	}
	p := e.h.Invoke(1, Buy, 1)
	inTx(func(tx *sqlx.Tx) error {
		if err := fence.ClaimOp(ctx, tx, e.item, 10, "owner-1", "claim-1"); err != nil {
			return err
		}
		return buyIn(ctx, tx, e.item, p.ID(), 1, 10, "claim-1", nil)
	})
	p.Return(Accepted, 0, 10, nil)
	if _, err := VerifyDatabase(ctx, e.db, e.item, e.stock, e.h.Ops()); err != nil {
		t.Fatalf("a consistent database was rejected: %v", err)
	}

	inTx(func(tx *sqlx.Tx) error { return fence.ClaimOp(ctx, tx, e.item, 20, "owner-2", "claim-2") })
	_, err := VerifyDatabase(ctx, e.db, e.item, e.stock, e.h.Ops())
	if err == nil || !strings.Contains(err.Error(), "fence row") {
		t.Fatalf("a fence row claimed past the last committed order was not reported: %v", err)
	}
	t.Logf("database check, as expected: %v", err)
}
