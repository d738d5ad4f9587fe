package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"
)

// Limits on input, enforced before anything is sent.
const (
	MaxSKULen = 64   // bytes, the width of the sku columns
	MaxQty    = 1000 // units in one order
)

var (
	// ErrSoldOut means the stock does not cover the order. The error returned
	// is a *SoldOutError carrying what is left.
	ErrSoldOut = errors.New("store: sold out")
	// ErrUnknownSKU means no inventory row exists for the SKU.
	ErrUnknownSKU = errors.New("store: unknown sku")
	// ErrInvalidOrder means the SKU or the quantity is out of range.
	ErrInvalidOrder = errors.New("store: invalid order")
)

// SoldOutError reports an order the stock could not cover.
type SoldOutError struct {
	SKU       string
	Wanted    int
	Available int
}

func (e *SoldOutError) Error() string {
	return fmt.Sprintf("store: sold out: %d of %q wanted, %d left", e.Wanted, e.SKU, e.Available)
}

// Is makes errors.Is(err, ErrSoldOut) true.
func (e *SoldOutError) Is(target error) bool { return target == ErrSoldOut }

// Execer is what the statements run on: a *sqlx.DB (autocommit), a
// *sqlx.Tx, or a *guard.Tx.
type Execer interface {
	sqlx.ExecerContext
	sqlx.QueryerContext
}

// Order is one purchase.
type Order struct {
	ID       string // unique; a retried transaction inserts it again, never twice
	SKU      string
	Qty      int
	Instance string // the application instance that took it
	Token    uint64 // fencing token it was written under; 0 when unlocked
}

// Validate checks the order's fields.
func (o Order) Validate() error {
	switch {
	case o.SKU == "" || len(o.SKU) > MaxSKULen || !utf8.ValidString(o.SKU):
		return fmt.Errorf("%w: sku must be 1..%d bytes of UTF-8", ErrInvalidOrder, MaxSKULen)
	case o.Qty < 1 || o.Qty > MaxQty:
		return fmt.Errorf("%w: qty must be 1..%d, got %d", ErrInvalidOrder, MaxQty, o.Qty)
	case o.ID == "" || len(o.ID) > 64:
		return fmt.Errorf("%w: order id must be 1..64 bytes", ErrInvalidOrder)
	}
	return nil
}

const (
	qStock      = `SELECT stock FROM inventory WHERE sku = ?`
	qSetStock   = `UPDATE inventory SET stock = ? WHERE sku = ?`
	qAddOrder   = `INSERT INTO orders (order_id, sku, qty, instance, token) VALUES (?, ?, ?, ?, ?)`
	qSeed       = `INSERT INTO inventory (sku, stock) VALUES (?, ?) ON DUPLICATE KEY UPDATE stock = ?`
	qSeedIfNew  = `INSERT IGNORE INTO inventory (sku, stock) VALUES (?, ?)`
	qDropOrders = `DELETE FROM orders WHERE sku = ?`
	qTotals     = `SELECT COUNT(*), COALESCE(SUM(qty), 0) FROM orders WHERE sku = ?`
)

// Purchase runs one order's statements on q: read the stock, check it,
// call between (if not nil; the example injects stalls there), write the new
// stock and record the order. It returns the stock left after the order.
//
// Purchase is only as safe as what q runs under. In autocommit mode or a
// plain transaction, concurrent purchases of one SKU lose updates and sell
// more than the stock. Inside guard.Do they are serialised and fenced.
func Purchase(ctx context.Context, q Execer, o Order, between func(ctx context.Context)) (left int, err error) {
	if err := o.Validate(); err != nil {
		return 0, err
	}
	stock, err := Stock(ctx, q, o.SKU)
	if err != nil {
		return 0, err
	}
	return SellFrom(ctx, q, o, stock, between)
}

// StockQuery reads the stock of the SKU given as its argument: the read a
// purchase begins with, for a caller that sends it itself (guard.DoRead
// sends it with the fence claim), then calls SellFrom.
const StockQuery = qStock

// SellFrom runs the rest of Purchase once the stock of o's SKU was read as
// stock, in the same transaction.
func SellFrom(ctx context.Context, q Execer, o Order, stock int, between func(ctx context.Context)) (left int, err error) {
	if err := o.Validate(); err != nil {
		return 0, err
	}
	if stock < o.Qty {
		return stock, &SoldOutError{SKU: o.SKU, Wanted: o.Qty, Available: stock}
	}
	if between != nil {
		between(ctx)
	}
	left = stock - o.Qty
	if _, err := q.ExecContext(ctx, qSetStock, left, o.SKU); err != nil {
		return 0, fmt.Errorf("store: update stock of %q: %w", o.SKU, err)
	}
	var token any
	if o.Token != 0 {
		token = o.Token
	}
	if _, err := q.ExecContext(ctx, qAddOrder, o.ID, o.SKU, o.Qty, o.Instance, token); err != nil {
		return 0, fmt.Errorf("store: record order %s: %w", o.ID, err)
	}
	return left, nil
}

// Stock returns the stock of sku, or an error matching ErrUnknownSKU.
func Stock(ctx context.Context, q Execer, sku string) (int, error) {
	var stock int
	err := sqlx.GetContext(ctx, q, &stock, qStock, sku)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q", ErrUnknownSKU, sku)
	}
	if err != nil {
		return 0, fmt.Errorf("store: read stock of %q: %w", sku, err)
	}
	return stock, nil
}

// Reset sets the stock of sku and deletes its orders, so that a run starts
// from a known state.
func Reset(ctx context.Context, db *sqlx.DB, sku string, stock int) error {
	if _, err := db.ExecContext(ctx, qSeed, sku, stock, stock); err != nil {
		return fmt.Errorf("store: seed %q: %w", sku, err)
	}
	if _, err := db.ExecContext(ctx, qDropOrders, sku); err != nil {
		return fmt.Errorf("store: clear orders of %q: %w", sku, err)
	}
	return nil
}

// SeedIfMissing creates sku with stock when it does not exist yet and leaves
// an existing SKU alone. It reports whether it created the row.
func SeedIfMissing(ctx context.Context, db *sqlx.DB, sku string, stock int) (bool, error) {
	res, err := db.ExecContext(ctx, qSeedIfNew, sku, stock)
	if err != nil {
		return false, fmt.Errorf("store: seed %q: %w", sku, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Totals are the database's own figures for one SKU after a run: the truth
// the report and the tests are judged by, whatever the clients believed.
type Totals struct {
	Initial  int // stock at the start of the run
	Orders   int // orders recorded
	Sold     int // units in recorded orders
	Final    int // stock now
	Oversold int // units sold beyond the initial stock
	Lost     int // units sold that the stock does not account for (lost updates)
}

// OK reports whether nothing was oversold and no update was lost: final
// stock == initial - units in accepted orders.
func (t Totals) OK() bool { return t.Oversold == 0 && t.Lost == 0 }

// ReadTotals reads the figures of sku, given the stock it started with.
func ReadTotals(ctx context.Context, db *sqlx.DB, sku string, initial int) (Totals, error) {
	t := Totals{Initial: initial}
	if err := db.QueryRowxContext(ctx, qTotals, sku).Scan(&t.Orders, &t.Sold); err != nil {
		return t, fmt.Errorf("store: totals of %q: %w", sku, err)
	}
	final, err := Stock(ctx, db, sku)
	if err != nil {
		return t, err
	}
	t.Final = final
	t.Oversold = max(0, t.Sold-initial)
	t.Lost = t.Sold - (initial - final)
	return t, nil
}
