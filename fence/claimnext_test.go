package fence_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
)

// mintFunc is ClaimNext or ClaimNextExisting.
type mintFunc func(ctx context.Context, tx fence.Querier, resource, owner, opID string) (uint64, error)

// Tokens minted by the database grow across every claim, whichever kind
// came before: above a token from the future that Claim accepted, above the
// clock otherwise; an older Claim token is stale afterwards. The same for
// ClaimNextExisting, on a row made by Ensure.
func TestClaimNextMintsAboveEverything(t *testing.T) {
	for name, mint := range map[string]mintFunc{"ClaimNext": fence.ClaimNext, "ClaimNextExisting": fence.ClaimNextExisting} {
		t.Run(name, func(t *testing.T) { testClaimNextMints(t, mint, name == "ClaimNextExisting") })
	}
}

func testClaimNextMints(t *testing.T, mint mintFunc, existing bool) {
	db, _ := newDBWithDSN(t)
	const res = "claim-next"
	before := uint64(time.Now().Add(-time.Minute).UnixMicro())
	if existing {
		// No row: refused, nothing created even when the transaction commits.
		tx := begin(t, db, nil)
		if _, err := mint(ctxT(t), tx, res, "db-mode", "op-0"); !errors.Is(err, fence.ErrNoFence) {
			t.Fatalf("ClaimNextExisting without a row = %v, want ErrNoFence", err)
		}
		commit(t, tx)
		if _, err := fence.Lookup(ctxT(t), db, res); !errors.Is(err, fence.ErrNoFence) {
			t.Fatalf("after ClaimNextExisting without a row: Lookup = %v, want ErrNoFence", err)
		}
		if err := fence.Ensure(ctxT(t), db, res); err != nil {
			t.Fatal(err)
		}
	}

	tx := begin(t, db, nil)
	t1, err := mint(ctxT(t), tx, res, "db-mode", "op-1")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	if t1 < before {
		t.Fatalf("first minted token %d is below the clock (%d a minute ago)", t1, before)
	}
	f := lookup(t, db, res)
	if f.Token != t1 || f.Owner != "db-mode" || f.OpID != "op-1" || f.Claims != 1 {
		t.Fatalf("fence after ClaimNext: %+v, token %d", f, t1)
	}

	// A Redis token from far ahead is accepted by Claim; the next minted
	// token goes above it.
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := claimCommitted(t, db, res, future, "redis-mode"); err != nil {
		t.Fatal(err)
	}
	tx = begin(t, db, nil)
	t2, err := mint(ctxT(t), tx, res, "db-mode", "op-2")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	if t2 != future+1 {
		t.Fatalf("token after a future one: %d, want %d", t2, future+1)
	}
	// The holder of an older Redis token is fenced.
	if err := claimCommitted(t, db, res, future, "redis-mode"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Claim with the token below the minted one = %v, want ErrStale", err)
	}
	tx = begin(t, db, nil)
	t3, err := mint(ctxT(t), tx, res, "db-mode", "op-3")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	if t3 <= t2 {
		t.Fatalf("tokens %d then %d: not increasing", t2, t3)
	}
}

func TestClaimNextBadInput(t *testing.T) {
	db, _ := newDBWithDSN(t)
	tx := begin(t, db, nil)
	for _, c := range []struct {
		resource, owner string
		want            error
	}{
		{"", "o", fence.ErrInvalidResource},
		{"r", "", fence.ErrInvalidOwner},
	} {
		if _, err := fence.ClaimNext(ctxT(t), tx, c.resource, c.owner, ""); !errors.Is(err, c.want) {
			t.Errorf("ClaimNext(%q, %q) = %v, want %v", c.resource, c.owner, err, c.want)
		}
		if _, err := fence.ClaimNextExisting(ctxT(t), tx, c.resource, c.owner, ""); !errors.Is(err, c.want) {
			t.Errorf("ClaimNextExisting(%q, %q) = %v, want %v", c.resource, c.owner, err, c.want)
		}
	}
	if _, err := fence.ClaimNext(ctxT(t), db, "r", "o", ""); !errors.Is(err, fence.ErrNotTx) {
		t.Errorf("ClaimNext on a pool = %v, want ErrNotTx", err)
	}
	if _, err := fence.ClaimNextExisting(ctxT(t), db, "r", "o", ""); !errors.Is(err, fence.ErrNotTx) {
		t.Errorf("ClaimNextExisting on a pool = %v, want ErrNotTx", err)
	}
	if _, err := fence.Lookup(ctxT(t), db, "r"); !errors.Is(err, fence.ErrNoFence) {
		t.Errorf("bad input wrote a fence row: %v", err)
	}
}

// ClaimNextExisting reads 0 as no row matched and any other answer below the
// clock as unexpected: never a token. The answer is an unsigned 64-bit
// integer whose bits the driver passes as an int64: a negative one is a
// token at or above 2^63.
func TestClaimNextExistingFailsSafe(t *testing.T) {
	for _, answer := range []int64{0, 1, 2} {
		tok, err := fence.ClaimNextExisting(context.Background(), fakeTx{answer}, "r", "o", "")
		want := fence.ErrUnexpected
		if answer == 0 {
			want = fence.ErrNoFence
		}
		if tok != 0 || !errors.Is(err, want) {
			t.Errorf("answer %d: token %d, %v; want 0, %v", answer, tok, err, want)
		}
	}
	for answer, want := range map[int64]uint64{1 << 50: 1 << 50, math.MinInt64: 1 << 63, -1: math.MaxUint64} {
		if tok, err := fence.ClaimNextExisting(context.Background(), fakeTx{answer}, "r", "o", ""); err != nil || tok != want {
			t.Errorf("answer %d: %d, %v; want %d", answer, tok, err, want)
		}
	}
}

// Tokens run up to 2^64-1, as in Redis mode and RaiseTokenFloor: a row at or
// above 2^63 is claimed with the next token, the row's largest token is
// minted too, and a row already there is refused by the server, never
// claimed with a token that is not above it.
func TestClaimNextAboveInt64(t *testing.T) {
	for name, mint := range map[string]mintFunc{"ClaimNext": fence.ClaimNext, "ClaimNextExisting": fence.ClaimNextExisting} {
		t.Run(name, func(t *testing.T) {
			db, _ := newDBWithDSN(t)
			const res = "claim-next-huge"
			for _, stored := range []uint64{1 << 63, 1<<63 + 5, math.MaxUint64 - 1} {
				if err := claimCommitted(t, db, res, stored, "redis-mode"); err != nil {
					t.Fatalf("Claim with %d: %v", stored, err)
				}
				tx := begin(t, db, nil)
				tok, err := mint(ctxT(t), tx, res, "db-mode", "op-huge")
				if err != nil {
					t.Fatalf("%s above %d: %v", name, stored, err)
				}
				commit(t, tx)
				if tok != stored+1 {
					t.Fatalf("%s above %d minted %d, want %d", name, stored, tok, stored+1)
				}
				if f := lookup(t, db, res); f.Token != tok || f.OpID != "op-huge" {
					t.Fatalf("fence after minting %d: %+v", tok, f)
				}
			}
			// The row holds 2^64-1: no token is above it.
			tx := begin(t, db, nil)
			if tok, err := mint(ctxT(t), tx, res, "db-mode", "op-over"); err == nil {
				t.Fatalf("%s above 2^64-1 minted %d", name, tok)
			}
			_ = tx.Rollback()
			if f := lookup(t, db, res); f.Token != math.MaxUint64 || f.OpID != "op-huge" {
				t.Fatalf("fence after a claim above 2^64-1 failed: %+v", f)
			}
		})
	}
}
