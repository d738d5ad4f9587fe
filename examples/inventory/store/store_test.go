package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMigrateIsIdempotentAndCreatesTables(t *testing.T) {
	db := testenv.MySQL(t)
	ctx := ctxT(t)
	for range 2 {
		if err := Migrate(ctx, db.DB); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"inventory", "orders", "redfence_fences", MigrationsTable, "redfence_schema_migrations"} {
		var n int
		if err := db.GetContext(ctx, &n, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table); err != nil || n != 1 {
			t.Fatalf("table %s: n=%d err=%v", table, n, err)
		}
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("Migrate closed the caller's pool: %v", err)
	}
}

func TestPurchase(t *testing.T) {
	db := testenv.MySQL(t)
	ctx := ctxT(t)
	if err := Migrate(ctx, db.DB); err != nil {
		t.Fatal(err)
	}
	if err := Reset(ctx, db, "apple", 3); err != nil {
		t.Fatal(err)
	}
	calls := 0
	left, err := Purchase(ctx, db, Order{ID: "o1", SKU: "apple", Qty: 2, Instance: "t", Token: 7}, func(context.Context) { calls++ })
	if err != nil || left != 1 || calls != 1 {
		t.Fatalf("Purchase = %d, %v (between called %d times)", left, err, calls)
	}
	_, err = Purchase(ctx, db, Order{ID: "o2", SKU: "apple", Qty: 2, Instance: "t"}, func(context.Context) { calls++ })
	var so *SoldOutError
	if !errors.Is(err, ErrSoldOut) || !errors.As(err, &so) || so.Available != 1 || so.Wanted != 2 {
		t.Fatalf("over-large order: %v", err)
	}
	if calls != 1 {
		t.Fatal("between ran for a sold-out order")
	}
	if _, err := Purchase(ctx, db, Order{ID: "o3", SKU: "pear", Qty: 1}, nil); !errors.Is(err, ErrUnknownSKU) {
		t.Fatalf("unknown SKU: %v", err)
	}
	if _, err := Purchase(ctx, db, Order{ID: "o1", SKU: "apple", Qty: 1}, nil); err == nil {
		t.Fatal("an order id was recorded twice")
	}
	tot, err := ReadTotals(ctx, db, "apple", 3)
	if err != nil {
		t.Fatal(err)
	}
	// The duplicate o1 wrote the stock (autocommit) before its INSERT
	// failed: exactly the kind of lost update the totals must expose.
	want := Totals{Initial: 3, Orders: 1, Sold: 2, Final: 0, Oversold: 0, Lost: -1}
	if tot != want || tot.OK() {
		t.Fatalf("totals = %+v, want %+v and not OK", tot, want)
	}
	var token uint64
	if err := db.GetContext(ctx, &token, "SELECT token FROM orders WHERE order_id = 'o1'"); err != nil || token != 7 {
		t.Fatalf("token recorded = %d, %v", token, err)
	}
}

func TestTotalsExposeOversell(t *testing.T) {
	db := testenv.MySQL(t)
	ctx := ctxT(t)
	if err := Migrate(ctx, db.DB); err != nil {
		t.Fatal(err)
	}
	if err := Reset(ctx, db, "kiwi", 1); err != nil {
		t.Fatal(err)
	}
	// Two buyers in plain transactions both read stock 1 before either
	// writes: the oversell of an unguarded read-then-write, made
	// deterministic by a barrier between the read and the write.
	var read sync.WaitGroup
	read.Add(2)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			tx, err := db.BeginTxx(ctx, nil)
			if err != nil {
				errs <- err
				return
			}
			_, err = Purchase(ctx, tx, Order{ID: fmt.Sprint("k", i), SKU: "kiwi", Qty: 1, Instance: "t"},
				func(context.Context) { read.Done(); read.Wait() })
			if err != nil {
				_ = tx.Rollback()
				errs <- err
				return
			}
			errs <- tx.Commit()
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	tot, err := ReadTotals(ctx, db, "kiwi", 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Totals{Initial: 1, Orders: 2, Sold: 2, Final: 0, Oversold: 1, Lost: 1}); tot != want || tot.OK() {
		t.Fatalf("totals = %+v, want %+v", tot, want)
	}
	if err := Reset(ctx, db, "kiwi", 2); err != nil {
		t.Fatal(err)
	}
	tot, err = ReadTotals(ctx, db, "kiwi", 2)
	if err != nil || tot.Orders != 0 || tot.Final != 2 || !tot.OK() {
		t.Fatalf("Reset did not restore a clean state: %+v %v", tot, err)
	}
}

func TestOrderValidate(t *testing.T) {
	long := make([]byte, MaxSKULen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, o := range []Order{
		{ID: "x", SKU: "", Qty: 1},
		{ID: "x", SKU: string(long), Qty: 1},
		{ID: "x", SKU: "\xff", Qty: 1},
		{ID: "x", SKU: "a", Qty: 0},
		{ID: "x", SKU: "a", Qty: MaxQty + 1},
		{ID: "", SKU: "a", Qty: 1},
	} {
		if err := o.Validate(); !errors.Is(err, ErrInvalidOrder) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if err := (Order{ID: "x", SKU: "a", Qty: MaxQty}).Validate(); err != nil {
		t.Fatal(err)
	}
}
