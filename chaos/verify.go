package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
)

// Summary is the result of one scenario.
type Summary struct {
	Scenario     string
	Ops          int // buys and reads recorded
	Accepted     int
	Fenced       int
	Unknown      int
	SoldOut      int
	Failed       int
	Reads        int
	Oversold     int
	Linearizable bool
	Orders       int // orders committed at the database
}

// Line is the one-line summary printed by every scenario.
func (s Summary) Line() string {
	lin := "no"
	if s.Linearizable {
		lin = "yes"
	}
	return fmt.Sprintf("scenario=%s ops=%d accepted=%d fenced=%d unknown=%d oversold=%d linearizable=%s soldout=%d failed=%d reads=%d orders=%d",
		s.Scenario, s.Ops, s.Accepted, s.Fenced, s.Unknown, s.Oversold, lin, s.SoldOut, s.Failed, s.Reads, s.Orders)
}

type order struct {
	OpID       string `db:"op_id"`
	Qty        int    `db:"qty"`
	Token      uint64 `db:"token"`
	Seq        int64  `db:"seq"`
	StockAfter int    `db:"stock_after"`
	FenceOp    string `db:"fence_op"`
	RowOp      string `db:"row_op"`
}

// VerifyDatabase compares the history with what the database holds for
// item, which started with initial units, and returns the summary counts
// (Linearizable is left false: see [CheckLinearizable]). Every violation is
// returned, joined:
//   - each accepted buy has exactly one order, each sold-out, fenced or
//     failed buy none, each unknown buy at most one, and no order belongs to
//     an operation that was never invoked;
//   - orders in commit (seq) order have seq 1..n, strictly increasing
//     tokens, and stock_after that follows from the previous order;
//   - the item's stock and seq match the orders and nothing is oversold;
//   - the fence row names the last committed order: its token and claim
//     operation id. Every committed transaction of the workload claimed the
//     row and wrote one order, and a claim that is refused or rolled back
//     leaves the row as it was, so a commit whose claim did not hold the row
//     until COMMIT (or that made none) shows up here when it came last.
func VerifyDatabase(ctx context.Context, db *sqlx.DB, item string, initial int, ops []Op) (Summary, error) {
	var s Summary
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var orders []order
	if err := db.SelectContext(ctx, &orders, `SELECT op_id, qty, token, seq, stock_after, fence_op, row_op FROM orders WHERE item = ? ORDER BY seq, id`, item); err != nil {
		return s, fmt.Errorf("chaos: read orders: %w", err)
	}
	s.Orders = len(orders)
	perOp := map[string]int{}
	for _, o := range orders {
		perOp[o.OpID]++
	}
	invoked := map[string]bool{}
	for _, op := range ops {
		s.Ops++
		if op.Kind == Read {
			s.Reads++
			continue
		}
		invoked[op.ID] = true
		n := perOp[op.ID]
		switch op.Outcome {
		case Accepted:
			s.Accepted++
			if n != 1 {
				fail("accepted buy %s has %d orders, want exactly 1", op.ID, n)
			}
		case SoldOut, Fenced, Failed:
			switch op.Outcome {
			case SoldOut:
				s.SoldOut++
			case Fenced:
				s.Fenced++
			default:
				s.Failed++
			}
			if n != 0 {
				fail("buy %s reported %s (%s) but has %d orders", op.ID, op.Outcome, op.Err, n)
			}
		default:
			s.Unknown++
			if n > 1 {
				fail("buy %s of unknown outcome was applied %d times", op.ID, n)
			}
		}
	}
	for id, n := range perOp {
		if !invoked[id] {
			fail("%d orders of operation %s that the history does not contain", n, id)
		}
	}

	stock, sold := initial, 0
	var lastToken uint64
	var lastOp string
	for i, o := range orders {
		if o.Seq != int64(i+1) {
			fail("order %d (op %s) has seq %d, want %d: lost or duplicated write", i+1, o.OpID, o.Seq, i+1)
		}
		// Orders of one transaction (the buys of one batch) share its
		// token and claim; from one transaction to the next the token must
		// grow.
		if i > 0 && (o.Token < lastToken || o.Token == lastToken && o.FenceOp != lastOp) {
			fail("token not strictly increasing in commit order: seq %d token %d (claim %q) after %d (claim %q)",
				o.Seq, o.Token, o.FenceOp, lastToken, lastOp)
		}
		if o.RowOp != o.FenceOp {
			fail("order seq %d (op %s) was written under claim %q but the fence row showed %q: its transaction did not hold its own claim",
				o.Seq, o.OpID, o.FenceOp, o.RowOp)
		}
		stock -= o.Qty
		sold += o.Qty
		if o.StockAfter != stock {
			fail("order seq %d left stock %d, want %d", o.Seq, o.StockAfter, stock)
		}
		lastToken, lastOp = o.Token, o.FenceOp
	}
	if sold > initial {
		s.Oversold = sold - initial
	}
	var cur struct {
		Stock int   `db:"stock"`
		Seq   int64 `db:"seq"`
	}
	if err := db.GetContext(ctx, &cur, `SELECT stock, seq FROM items WHERE id = ?`, item); err != nil {
		return s, fmt.Errorf("chaos: read item: %w", err)
	}
	if cur.Stock < 0 && -cur.Stock > s.Oversold {
		s.Oversold = -cur.Stock
	}
	if cur.Stock != stock || cur.Seq != int64(len(orders)) {
		fail("item %s has stock=%d seq=%d, orders say stock=%d seq=%d", item, cur.Stock, cur.Seq, stock, len(orders))
	}
	if s.Oversold != 0 {
		fail("oversold by %d units", s.Oversold)
	}
	if len(orders) > 0 {
		f, err := lookupFence(ctx, db, item)
		switch {
		case err != nil:
			fail("fence row of %s: %v", item, err)
		case f.Token != lastToken || f.OpID != lastOp:
			fail("fence row holds token %d, claim %q; the last committed order was written under token %d, claim %q",
				f.Token, f.OpID, lastToken, lastOp)
		}
	}
	return s, errors.Join(errs...)
}

// ArtifactDir is where visualisations and the summary file are written:
// artifacts/ next to the package's sources (go test runs in that directory).
const ArtifactDir = "artifacts"

// AppendSummary appends line, time-stamped, to artifacts/summary.txt.
func AppendSummary(line string) error {
	if err := os.MkdirAll(ArtifactDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(ArtifactDir, "summary.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), strings.TrimSpace(line))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lookupFence reads the fence row of item under whatever namespace the
// holders' Guards gave it (guard.Options.Namespace defaults to the Locker's
// prefix): the row named item itself or ending in "{" + item.
func lookupFence(ctx context.Context, db *sqlx.DB, item string) (fence.Fence, error) {
	var resources []string
	if err := db.SelectContext(ctx, &resources, "SELECT resource FROM "+fence.Table); err != nil {
		return fence.Fence{}, err
	}
	for _, r := range resources {
		if r == item || strings.HasSuffix(r, "{"+item) {
			return fence.Lookup(ctx, db, r)
		}
	}
	return fence.Fence{}, fmt.Errorf("%w: no fence row for %s among %q", fence.ErrNoFence, item, resources)
}

// ResolveUnknown returns ops with each buy of unknown outcome resolved by
// the orders the database holds for it (ordered: the op ids of the orders):
// Applied when it has one, Failed (no effect) when it has none. The
// linearizability check then need not try every subset of the unknown buys
// against the reads, which grows exponentially with their number; the
// effect of an applied one may still fall anywhere after its call. Run it
// only after VerifyDatabase has found no buy applied twice.
func ResolveUnknown(ops []Op, ordered map[string]bool) []Op {
	out := make([]Op, len(ops))
	for i, op := range ops {
		if op.Kind == Buy && op.Outcome == Unknown {
			if ordered[op.ID] {
				op.Outcome = Applied
			} else {
				op.Outcome = Failed
				op.Return = op.Call // no effect: placed anywhere
			}
		}
		out[i] = op
	}
	return out
}
