package guard

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redfence/redfence/fence"
)

// TestClaimOutcomeTable is the settle rule as a table: what the fence row,
// read after an attempt's COMMIT failed, says about that attempt (token
// 100, op "ours"). In order: our op id in the row → committed; the row's
// token not above ours → not committed; the claim after ours names our op as
// the one it replaced → committed; it replaced an older token → not
// committed; anything else (two or more newer claims, or the one before it
// under our token with another op id) → unknown, never a definite answer.
//
// It catches a rule that reads "a newer token in the row" as not committed
// (the commonest shortcut: then a commit followed by a next holder's claim
// is reported as not committed, and the caller runs work twice), one that
// trusts prev_op_id or prev_token alone, an off-by-one at prev_token == ours,
// and a read error taken for an answer.
func TestClaimOutcomeTable(t *testing.T) {
	const ours = 100
	errRead := errors.New("read failed")
	cases := []struct {
		name      string
		f         fence.Fence
		err       error
		committed bool
		unknown   bool // errUnsettled
		fails     error
	}{
		{name: "no row", err: fmt.Errorf("x: %w", fence.ErrNoFence)},
		{name: "read error", err: errRead, fails: errRead},
		{name: "our claim is the last one", f: fence.Fence{Token: ours, OpID: "ours", PrevToken: 90, PrevOpID: "older"}, committed: true},
		{name: "an older token: our claim never landed", f: fence.Fence{Token: 90, OpID: "older", PrevToken: 80, PrevOpID: "oldest"}},
		{name: "our token under another op (an earlier attempt of ours)", f: fence.Fence{Token: ours, OpID: "attempt-1", PrevToken: 90, PrevOpID: "older"}},
		{name: "our token under later attempts of ours", f: fence.Fence{Token: ours, OpID: "attempt-3", PrevToken: ours, PrevOpID: "attempt-2"}},
		{name: "one newer claim replaced ours", f: fence.Fence{Token: 110, OpID: "next", PrevToken: ours, PrevOpID: "ours"}, committed: true},
		{name: "one newer claim replaced an older token", f: fence.Fence{Token: 110, OpID: "next", PrevToken: 90, PrevOpID: "older"}},
		{name: "one newer claim replaced an ensured row", f: fence.Fence{Token: 110, OpID: "next"}},
		{name: "the newer claim replaced our token under another op", f: fence.Fence{Token: 110, OpID: "next", PrevToken: ours, PrevOpID: "attempt-2"}, unknown: true},
		{name: "two newer claims", f: fence.Fence{Token: 120, OpID: "after-next", PrevToken: 110, PrevOpID: "next"}, unknown: true},
		{name: "two newer claims, the first one token above ours", f: fence.Fence{Token: 120, OpID: "after-next", PrevToken: ours + 1, PrevOpID: "next"}, unknown: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.f.Resource = "r"
			committed, err := claimOutcome(&Tx{key: "k", resource: "r", token: ours, opID: "ours"}, c.f, c.err)
			switch {
			case c.fails != nil:
				if committed || !errors.Is(err, c.fails) {
					t.Fatalf("claimOutcome = %v, %v; want the read error", committed, err)
				}
			case c.unknown:
				if committed || !errors.Is(err, errUnsettled) {
					t.Fatalf("claimOutcome(%+v) = %v, %v; want unknown (errUnsettled)", c.f, committed, err)
				}
			default:
				if committed != c.committed || err != nil {
					t.Fatalf("claimOutcome(%+v) = %v, %v; want %v, nil", c.f, committed, err, c.committed)
				}
			}
		})
	}
}
