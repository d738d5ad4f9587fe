package fence_test

import (
	"errors"
	"testing"

	"github.com/redfence/redfence/fence"
)

// TestEqualTokenRaceBetweenOwners: two transactions present the same token
// at once, as a holder and a clone of its grant (or a retry of its own
// transaction) would. The second claim waits for the first transaction's
// row lock; once that commits, the equal token is accepted only for the
// same owner, byte for byte. With another owner it is stale and the row,
// including what it says the last claim replaced, stays as the first claim
// left it; with the same owner it is accepted, and the row names the first
// claim as the one it replaced.
//
// It catches an acceptance rule that lets an equal token through for any
// owner (a clone's write would follow the holder's), that compares owners
// loosely (a prefix, case), that refuses the owner's own equal token (a
// retried attempt under its token would be fenced), or that forgets to
// keep what an equal-token claim replaced.
func TestEqualTokenRaceBetweenOwners(t *testing.T) {
	cases := map[string]struct {
		first, second string
		accepted      bool
	}{
		"other owner":              {"holder", "clone", false},
		"other owner, prefix":      {"holder-1", "holder", false},
		"other owner, extended":    {"holder", "holder-1", false},
		"other owner, case":        {"holder", "Holder", false},
		"same owner":               {"holder", "holder", true},
		"same owner, binary bytes": {"h\x00\xff", "h\x00\xff", true},
	}
	claims := map[string]claimFunc{"ClaimOp": fence.ClaimOp, "ClaimExisting": fence.ClaimExisting}
	db := newDB(t)
	db.SetMaxOpenConns(4)
	for name, c := range cases {
		for cname, claim := range claims {
			t.Run(name+"/"+cname, func(t *testing.T) {
				ctx := ctxT(t)
				res := "equal:" + name + ":" + cname
				const older, token = 41, 42
				if err := fence.Ensure(ctx, db, res); err != nil {
					t.Fatal(err)
				}
				tx0 := begin(t, db, nil)
				if err := claim(ctx, tx0, res, older, "before", "op-0"); err != nil {
					t.Fatal(err)
				}
				commit(t, tx0)

				tx1, _, done1, err := connTx(ctx, db, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer done1()
				if err := claim(ctx, tx1, res, token, c.first, "op-1"); err != nil {
					t.Fatalf("first claim of %d: %v", token, err)
				}
				tx2, id2, done2, err := connTx(ctx, db, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer done2()
				second := make(chan error, 1)
				finished := make(chan struct{})
				go func() {
					defer close(finished)
					second <- claim(ctx, tx2, res, token, c.second, "op-2")
				}()
				// The second claim must wait for the first transaction: an
				// equal token does not get past an open claim.
				waitLockWait(t, db, id2, finished)
				if err := tx1.Commit(); err != nil {
					t.Fatal(err)
				}
				err = <-second
				afterFirst := fence.Fence{Resource: res, Token: token, Owner: c.first, OpID: "op-1", PrevToken: older, PrevOpID: "op-0"}
				if !c.accepted {
					var se *fence.StaleError
					if !errors.As(err, &se) || se.Current != token || se.CurrentOwner != c.first {
						t.Fatalf("claim of the equal token %d by %q after %q: %v, want a *StaleError naming %d and %q",
							token, c.second, c.first, err, token, c.first)
					}
					if err := tx2.Commit(); err != nil { // even committed, it must have changed nothing
						t.Fatal(err)
					}
					if f := lookup(t, db, res); !sameClaim(f, afterFirst) || f.Claims != 2 {
						t.Fatalf("a refused equal-token claim changed the row: %+v, want %+v and 2 claims", f, afterFirst)
					}
					return
				}
				if err != nil {
					t.Fatalf("claim of the equal token %d by the same owner %q: %v, want accepted", token, c.second, err)
				}
				if err := tx2.Commit(); err != nil {
					t.Fatal(err)
				}
				want := fence.Fence{Resource: res, Token: token, Owner: c.second, OpID: "op-2", PrevToken: token, PrevOpID: "op-1"}
				if f := lookup(t, db, res); !sameClaim(f, want) || f.Claims != 3 {
					t.Fatalf("after the same owner's equal-token claim: %+v, want %+v and 3 claims", f, want)
				}
			})
		}
	}
}

// sameClaim compares what a claim writes into a fence row.
func sameClaim(got, want fence.Fence) bool {
	return got.Token == want.Token && got.Owner == want.Owner && got.OpID == want.OpID &&
		got.PrevToken == want.PrevToken && got.PrevOpID == want.PrevOpID
}
