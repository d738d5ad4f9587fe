package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// inventoryModel is the sequential specification of one item's stock: a buy
// of q units succeeds only if at least q are left and then removes exactly
// q; sold-out, fenced and failed buys change nothing; a buy of unknown
// outcome may or may not have happened; a read returns the stock.
func inventoryModel(stock int) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{stock} },
		Step: func(state, input, output interface{}) []interface{} {
			s := state.(int)
			op := output.(Op)
			switch op.Kind {
			case Read:
				if op.Stock == s {
					return []interface{}{s}
				}
				return nil
			default:
				switch op.Outcome {
				case Accepted:
					if s >= op.Qty {
						return []interface{}{s - op.Qty}
					}
					return nil
				case SoldOut:
					if s < op.Qty {
						return []interface{}{s}
					}
					return nil
				case Fenced, Failed:
					return []interface{}{s}
				case Applied: // at any time after its call
					if s >= op.Qty {
						return []interface{}{s - op.Qty}
					}
					return nil
				default: // Unknown: applied or not
					if s >= op.Qty {
						return []interface{}{s, s - op.Qty}
					}
					return []interface{}{s}
				}
			}
		},
		Equal: func(a, b interface{}) bool { return a == b },
		DescribeOperation: func(_, output interface{}) string {
			op := output.(Op)
			if op.Kind == Read {
				return fmt.Sprintf("read() -> %d", op.Stock)
			}
			s := fmt.Sprintf("buy(%d) -> %s", op.Qty, op.Outcome)
			if op.Token != 0 {
				s += fmt.Sprintf(" [token %d]", op.Token)
			}
			if op.Err != "" && op.Outcome != Accepted {
				s += " (" + op.Err + ")"
			}
			return s
		},
		DescribeState: func(state interface{}) string { return fmt.Sprintf("stock=%d", state.(int)) },
	}
	return nm.ToModel()
}

// CheckResult is the verdict on one history.
type CheckResult struct {
	Linearizable bool
	// Visualisation is the HTML file written when the history is not
	// linearizable (or the check timed out), else "".
	Visualisation string
}

// CheckLinearizable checks ops against the inventory model starting from
// stock units. Unknown buys are given an open end (they may take effect at
// any time after their call). When the history is not linearizable, or the
// check runs out of time, porcupine's HTML visualisation is written to
// artifactDir/<name>-<time>.html.
func CheckLinearizable(ops []Op, stock int, timeout time.Duration, artifactDir, name string) (CheckResult, error) {
	model := inventoryModel(stock)
	var end time.Duration
	for _, op := range ops {
		end = max(end, op.Return, op.Call)
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := op.Return
		if op.Kind == Buy && (op.Outcome == Unknown || op.Outcome == Applied) {
			ret = end + time.Second
		}
		hist = append(hist, porcupine.Operation{
			ClientId: op.Client, Input: op.Kind, Output: op,
			Call: int64(op.Call), Return: int64(ret),
		})
	}
	res, info := porcupine.CheckOperationsVerbose(model, hist, timeout)
	if res == porcupine.Ok {
		return CheckResult{Linearizable: true}, nil
	}
	if err := os.MkdirAll(artifactDir, 0o755); err != nil {
		return CheckResult{}, fmt.Errorf("chaos: artifacts directory: %w", err)
	}
	path := filepath.Join(artifactDir, fmt.Sprintf("%s-%s.html", sanitize(name), time.Now().UTC().Format("20060102T150405.000")))
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return CheckResult{}, fmt.Errorf("chaos: write visualisation: %w", err)
	}
	if res == porcupine.Unknown {
		return CheckResult{Visualisation: path}, fmt.Errorf("chaos: linearizability check of %d operations timed out after %v (partial visualisation: %s)", len(ops), timeout, path)
	}
	return CheckResult{Visualisation: path}, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
