package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

// ErrSoldOut is returned by [BuyFn] when fewer units are in stock than asked
// for; the transaction is rolled back.
var ErrSoldOut = errors.New("chaos: sold out")

// The inventory schema. orders.seq is the item's write sequence number taken
// inside the guarded transaction: the fence serialises holders, so seq order
// is commit order, and every write sets stock and seq from the values read
// (no relative UPDATE that InnoDB would serialise on its own), so a failure
// of the fence shows up as a duplicate seq, a lost update or an oversell
// rather than being hidden by the database. orders.fence_op is the
// operation id of the fence claim the order was written under, so the checks
// can tell whether the fence row names the last committed order; row_op is
// the operation id the fence row itself showed inside the transaction when
// the order was written, which is fence_op exactly when the transaction
// holds its own claim (a transaction that skipped or lost its claim sees
// another's).
const (
	createItems = `CREATE TABLE IF NOT EXISTS items (
	id VARCHAR(64) NOT NULL PRIMARY KEY,
	stock INT NOT NULL,
	seq BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB`
	createOrders = `CREATE TABLE IF NOT EXISTS orders (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	op_id VARCHAR(64) NOT NULL,
	item VARCHAR(64) NOT NULL,
	qty INT NOT NULL,
	token BIGINT UNSIGNED NOT NULL,
	seq BIGINT NOT NULL,
	stock_after INT NOT NULL,
	fence_op VARCHAR(191) NOT NULL,
	row_op VARCHAR(191) NOT NULL DEFAULT '',
	KEY (op_id)
) ENGINE=InnoDB`
	insertItem = `INSERT INTO items (id, stock, seq) VALUES (?, ?, 0)`
	selectItem = `SELECT stock, seq FROM items WHERE id = ?`
	updateItem = `UPDATE items SET stock = ?, seq = ? WHERE id = ?`
	// The fence row is read where the guarded write lands: in the order's
	// INSERT, by a locking read that sees the transaction's own claim.
	insertOrder = `INSERT INTO orders (op_id, item, qty, token, seq, stock_after, fence_op, row_op)
	SELECT ?, ?, ?, ?, ?, ?, ?, COALESCE((SELECT op_id FROM ` + fence.Table + `
		WHERE resource = ? OR resource LIKE CONCAT('%{', ?) LIMIT 1), '')`
	selectStock = `SELECT stock FROM items WHERE id = ?`
)

// Setup applies redfence's migrations and the inventory schema to db and
// stocks item with stock units.
func Setup(ctx context.Context, db *sqlx.DB, item string, stock int) error {
	if err := migrations.Apply(ctx, db.DB); err != nil {
		return fmt.Errorf("chaos: migrations: %w", err)
	}
	for _, q := range []string{createItems, createOrders} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("chaos: schema: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, insertItem, item, stock); err != nil {
		return fmt.Errorf("chaos: stock %s: %w", item, err)
	}
	return nil
}

// BuyFn returns the critical section of a buy of qty units of item recorded
// under opID. pause, when not nil, runs after the stock was read and before
// anything is written: the scenarios stop, delay or kill the holder there.
func BuyFn(item, opID string, qty int, pause func(ctx context.Context, tx *guard.Tx) error) func(ctx context.Context, tx *guard.Tx) error {
	return func(ctx context.Context, tx *guard.Tx) error {
		var p func(context.Context) error
		if pause != nil {
			p = func(ctx context.Context) error { return pause(ctx, tx) }
		}
		return buyIn(ctx, tx, item, opID, qty, tx.Token(), tx.OpID(), p)
	}
}

// stmts is what a buy needs of its transaction; *guard.Tx (whose methods
// watch the fenced transaction) and *sqlx.Tx both have it.
type stmts interface {
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// itemRow is what a buy reads of its item.
type itemRow struct {
	Stock int   `db:"stock"`
	Seq   int64 `db:"seq"`
}

// buyIn runs the statements of a buy in tx, which claimed the fence row with
// token under the claim operation id fenceOp.
func buyIn(ctx context.Context, tx stmts, item, opID string, qty int, token uint64, fenceOp string, pause func(context.Context) error) error {
	// The first statement, with which the claim rides under
	// guard.Options.ClaimWithFirstStatement.
	var row itemRow
	if err := tx.GetContext(ctx, &row, selectItem, item); err != nil {
		return fmt.Errorf("chaos: read stock: %w", err)
	}
	return buyAfter(ctx, tx, row, item, opID, qty, token, fenceOp, pause)
}

// BuyAfterRead returns a buy of qty units of item recorded under opID as
// guard.DoRead runs it: the read of the item, which goes with the claim,
// and the critical section that follows it (see BuyFn).
func BuyAfterRead(item, opID string, qty int, pause func(ctx context.Context, tx *guard.Tx) error) (guard.Read, func(ctx context.Context, tx *guard.Tx) error) {
	row := new(itemRow)
	return guard.ReadOne(row, selectItem, item), func(ctx context.Context, tx *guard.Tx) error {
		var p func(context.Context) error
		if pause != nil {
			p = func(ctx context.Context) error { return pause(ctx, tx) }
		}
		return buyAfter(ctx, tx, *row, item, opID, qty, tx.Token(), tx.OpID(), p)
	}
}

// buyAfter is buyIn once the item was read as row.
func buyAfter(ctx context.Context, tx stmts, row itemRow, item, opID string, qty int, token uint64, fenceOp string, pause func(context.Context) error) error {
	stock, seq := row.Stock, row.Seq
	if stock < qty {
		return ErrSoldOut
	}
	if pause != nil {
		if err := pause(ctx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, updateItem, stock-qty, seq+1, item); err != nil {
		return fmt.Errorf("chaos: update stock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, insertOrder, opID, item, qty, token, seq+1, stock-qty, fenceOp, item, item); err != nil {
		return fmt.Errorf("chaos: insert order: %w", err)
	}
	return nil
}

// ReadStock reads the committed stock of item outside any lock.
func ReadStock(ctx context.Context, db *sqlx.DB, item string) (int, error) {
	var stock int
	err := db.QueryRowxContext(ctx, selectStock, item).Scan(&stock)
	return stock, err
}

// Classify maps what guard.Do (or [ReplayBuy]) returned for a buy to an
// outcome. Errors that guard and fence document as "nothing was written"
// (fenced or stale, not committed, lock lost before commit, not acquired)
// are taken at their word, so the checks hold the library to them;
// everything else (timeouts, transport errors, an unknown commit outcome) is
// Unknown and the database checks settle what happened.
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return Accepted
	case errors.Is(err, ErrSoldOut):
		return SoldOut
	case errors.Is(err, guard.ErrFenced), errors.Is(err, fence.ErrStale):
		return Fenced
	case errors.Is(err, guard.ErrNotCommitted),
		errors.Is(err, guard.ErrLockLost),
		errors.Is(err, redislock.ErrNotAcquired),
		errors.Is(err, guard.ErrInvalidGuard),
		errors.Is(err, guard.ErrNilFunc):
		return Failed
	default:
		return Unknown
	}
}
