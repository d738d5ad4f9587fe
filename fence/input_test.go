package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/redfence/redfence/fence"
)

// TestClaimRejectsBadInput: every malformed argument gives its typed error
// before anything is sent, so no fence row is written.
func TestClaimRejectsBadInput(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	tx := begin(t, db, nil)
	var nilTx *sql.Tx
	var nilConn *sql.Conn
	long := strings.Repeat("r", fence.MaxResourceLen+1)
	cases := []struct {
		name     string
		q        fence.Querier
		resource string
		token    uint64
		owner    string
		opID     string
		want     error
	}{
		{"nil querier", nil, "r", 1, "o", "", fence.ErrNilTx},
		{"typed nil *sql.Tx", nilTx, "r", 1, "o", "", fence.ErrNilTx},
		{"typed nil *sql.Conn", nilConn, "r", 1, "o", "", fence.ErrNilTx},
		{"pool", db, "r", 1, "o", "", fence.ErrNotTx},
		{"*sql.DB pool", db.DB, "r", 1, "o", "", fence.ErrNotTx},
		{"empty resource", tx, "", 1, "o", "", fence.ErrInvalidResource},
		{"resource over 191 bytes", tx, long, 1, "o", "", fence.ErrInvalidResource},
		{"resource of 96 two-byte runes (192 bytes)", tx, strings.Repeat("é", 96), 1, "o", "", fence.ErrInvalidResource},
		{"resource not UTF-8", tx, "r\xff", 1, "o", "", fence.ErrInvalidResource},
		{"token 0", tx, "r", 0, "o", "", fence.ErrInvalidToken},
		{"empty owner", tx, "r", 1, "", "", fence.ErrInvalidOwner},
		{"owner over 191 bytes", tx, "r", 1, strings.Repeat("o", fence.MaxOwnerLen+1), "", fence.ErrInvalidOwner},
		{"op id over 191 bytes", tx, "r", 1, "o", strings.Repeat("x", fence.MaxOpIDLen+1), fence.ErrInvalidOpID},
	}
	for _, c := range cases {
		err := fence.ClaimOp(ctx, c.q, c.resource, c.token, c.owner, c.opID)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		err = fence.ClaimExisting(ctx, c.q, c.resource, c.token, c.owner, c.opID)
		if !errors.Is(err, c.want) {
			t.Errorf("ClaimExisting, %s: got %v, want %v", c.name, err, c.want)
		}
	}
	commit(t, tx)
	if n := countFences(t, db); n != 0 {
		t.Fatalf("bad input wrote %d fence rows", n)
	}

	// The limits themselves are accepted and stored intact.
	max := strings.Repeat("é", fence.MaxResourceLen/2) + "r" // 191 bytes
	owner := strings.Repeat("o", fence.MaxOwnerLen)
	opID := strings.Repeat("x", fence.MaxOpIDLen)
	tx = begin(t, db, nil)
	if err := fence.ClaimOp(ctx, tx, max, ^uint64(0), owner, opID); err != nil {
		t.Fatalf("claim at the limits: %v", err)
	}
	commit(t, tx)
	if f := lookup(t, db, max); f.Token != ^uint64(0) || f.Owner != owner || f.OpID != opID {
		t.Fatalf("stored at the limits: %+v", f)
	}
}

func TestLookupAndEnsureRejectBadInput(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	var nilTx *sql.Tx
	if _, err := fence.Lookup(ctx, nilTx, "r"); !errors.Is(err, fence.ErrNilTx) {
		t.Errorf("Lookup(nil tx): %v", err)
	}
	if _, err := fence.Lookup(ctx, db, ""); !errors.Is(err, fence.ErrInvalidResource) {
		t.Errorf("Lookup(empty): %v", err)
	}
	if err := fence.Ensure(ctx, nilTx, "r"); !errors.Is(err, fence.ErrNilTx) {
		t.Errorf("Ensure(nil tx): %v", err)
	}
	if err := fence.Ensure(ctx, db, strings.Repeat("r", 192)); !errors.Is(err, fence.ErrInvalidResource) {
		t.Errorf("Ensure(long): %v", err)
	}
	if n := countFences(t, db); n != 0 {
		t.Fatalf("bad input wrote %d fence rows", n)
	}
}

// fakeResult answers a claim with a chosen LAST_INSERT_ID.
type fakeResult int64

func (r fakeResult) LastInsertId() (int64, error) { return int64(r), nil }
func (r fakeResult) RowsAffected() (int64, error) { return 1, nil }

type fakeTx struct{ answer int64 }

func (f fakeTx) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return fakeResult(f.answer), nil
}
func (f fakeTx) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

// TestClaimFailsSafe: any outcome other than the two documented ones,
// including the 0 a server ignoring LAST_INSERT_ID(expr) would send, is an
// error, never an accepted claim; for ClaimExisting 0 means no row.
func TestClaimFailsSafe(t *testing.T) {
	for _, answer := range []int64{0, 3, -1, 1 << 40} {
		err := fence.Claim(context.Background(), fakeTx{answer}, "r", 1, "o")
		if !errors.Is(err, fence.ErrUnexpected) {
			t.Errorf("answer %d: %v, want ErrUnexpected", answer, err)
		}
	}
	if err := fence.Claim(context.Background(), fakeTx{1}, "r", 1, "o"); err != nil {
		t.Errorf("answer 1: %v", err)
	}
	// ClaimExisting reads 0 as no row matched: refused, never accepted.
	for _, answer := range []int64{0, 3, -1, 1 << 40} {
		err := fence.ClaimExisting(context.Background(), fakeTx{answer}, "r", 1, "o", "")
		want := fence.ErrUnexpected
		if answer == 0 {
			want = fence.ErrNoFence
		}
		if !errors.Is(err, want) {
			t.Errorf("ClaimExisting, answer %d: %v, want %v", answer, err, want)
		}
	}
}
