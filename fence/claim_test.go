package fence_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // the test needs a zone other than UTC wherever it runs

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
)

// claimFunc is ClaimOp or ClaimExisting.
type claimFunc func(ctx context.Context, tx fence.Querier, resource string, token uint64, owner, opID string) error

// TestClaimRules walks one resource through every acceptance rule and checks
// that a rejected claim leaves the row exactly as it was, on DSNs that change
// how the server reports affected rows and how arguments are sent, for
// ClaimOp and for ClaimExisting.
func TestClaimRules(t *testing.T) {
	for name, claim := range map[string]claimFunc{"ClaimOp": fence.ClaimOp, "ClaimExisting": fence.ClaimExisting} {
		t.Run(name, func(t *testing.T) { testClaimRules(t, claim, name == "ClaimExisting") })
	}
}

func testClaimRules(t *testing.T, claim claimFunc, existing bool) {
	_, dsn := newDBWithDSN(t)
	variants := map[string]func(*mysql.Config){
		"default":           func(*mysql.Config) {},
		"clientFoundRows":   func(c *mysql.Config) { c.ClientFoundRows = true },
		"interpolateParams": func(c *mysql.Config) { c.InterpolateParams = true },
		// MariaDB only: every assignment of an UPDATE reads the old row.
		"simultaneousAssignment": func(c *mysql.Config) {
			c.Params = map[string]string{"sql_mode": "'STRICT_TRANS_TABLES,SIMULTANEOUS_ASSIGNMENT'"}
		},
	}
	for name, edit := range variants {
		t.Run(name, func(t *testing.T) {
			db := openWith(t, dsn, edit)
			res := "rules:" + name + ":" + strconv.FormatBool(existing)
			ctx := ctxT(t)

			claimCommitted := func(t *testing.T, db *sqlx.DB, res string, token uint64, owner string) error {
				t.Helper()
				tx := begin(t, db, nil)
				if err := claim(ctx, tx, res, token, owner, ""); err != nil {
					_ = tx.Rollback()
					return err
				}
				commit(t, tx)
				return nil
			}
			if existing {
				// No row yet: refused, and nothing is created, even when
				// the transaction commits.
				tx := begin(t, db, nil)
				if err := claim(ctx, tx, res, 100, "alice", "op-1"); !errors.Is(err, fence.ErrNoFence) {
					t.Fatalf("claim without a row: %v, want ErrNoFence", err)
				}
				commit(t, tx)
				if _, err := fence.Lookup(ctx, db, res); !errors.Is(err, fence.ErrNoFence) {
					t.Fatalf("after a claim without a row: Lookup = %v, want ErrNoFence", err)
				}
				if err := fence.Ensure(ctx, db, res); err != nil {
					t.Fatal(err)
				}
			}
			// First claim (creates the row, or takes the ensured one).
			tx := begin(t, db, nil)
			if err := claim(ctx, tx, res, 100, "alice", "op-1"); err != nil {
				t.Fatalf("first claim: %v", err)
			}
			commit(t, tx)
			f := lookup(t, db, res)
			if f.Token != 100 || f.Owner != "alice" || f.OpID != "op-1" || f.Claims != 1 || f.UpdatedAt.IsZero() {
				t.Fatalf("after first claim: %+v", f)
			}

			// The same holder writes twice under one token: accepted, counted.
			for i := range 2 {
				if err := claimCommitted(t, db, res, 100, "alice"); err != nil {
					t.Fatalf("same token, same owner, write %d: %v", i, err)
				}
			}
			if f = lookup(t, db, res); f.Token != 100 || f.Owner != "alice" || f.OpID != "" || f.Claims != 3 {
				t.Fatalf("after repeated claims: %+v", f)
			}

			// A greater token from another owner takes the fence: owner,
			// token and op id all change (assignment order matters here).
			tx = begin(t, db, nil)
			if err := claim(ctx, tx, res, 200, "bob", "op-2"); err != nil {
				t.Fatalf("greater token: %v", err)
			}
			commit(t, tx)
			want := lookup(t, db, res)
			if want.Token != 200 || want.Owner != "bob" || want.OpID != "op-2" || want.Claims != 4 {
				t.Fatalf("after greater token: %+v", want)
			}

			rejected := []struct {
				name  string
				token uint64
				owner string
			}{
				{"lower token, same owner", 199, "bob"},
				{"lower token, other owner", 100, "alice"},
				{"equal token, other owner", 200, "alice"},
				{"equal token, owner differing in case", 200, "Bob"},
				{"equal token, owner with trailing space", 200, "bob "},
			}
			for _, c := range rejected {
				tx := begin(t, db, nil)
				err := claim(ctx, tx, res, c.token, c.owner, "op-x")
				var se *fence.StaleError
				if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
					t.Fatalf("%s: got %v, want a *StaleError", c.name, err)
				}
				if se.Resource != res || se.Token != c.token || se.Owner != c.owner || se.Current != 200 || se.CurrentOwner != "bob" {
					t.Fatalf("%s: figures %+v", c.name, *se)
				}
				// Commit on purpose: even then nothing may have changed.
				commit(t, tx)
				if got := lookup(t, db, res); got != want {
					t.Fatalf("%s changed the row:\n got %+v\nwant %+v", c.name, got, want)
				}
			}
		})
	}
}

// TestClaimResourcesAreByteStrings checks that resources differing only in
// case or trailing spaces, which collations may call equal, are distinct.
func TestClaimResourcesAreByteStrings(t *testing.T) {
	db := newDB(t)
	for i, r := range []string{"k", "K", "k ", "ĸ", "k\x00"} {
		if err := claimCommitted(t, db, r, uint64(10-i), "o"); err != nil {
			t.Fatalf("claim %q: %v", r, err)
		}
	}
	if n := countFences(t, db); n != 5 {
		t.Fatalf("%d fence rows, want 5", n)
	}
	if f := lookup(t, db, "k"); f.Token != 10 {
		t.Fatalf("resource k: %+v", f)
	}
}

// TestClaimIgnoresSessionLastInsertID checks that a LAST_INSERT_ID() left in
// the session by earlier statements cannot be mistaken for a claim outcome,
// also when ClaimExisting's UPDATE matches no row.
func TestClaimIgnoresSessionLastInsertID(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	if err := claimCommitted(t, db, "r", 50, "a"); err != nil {
		t.Fatal(err)
	}
	for _, leftover := range []int{1, 2, 7, 1 << 50} {
		tx := begin(t, db, nil)
		if _, err := tx.ExecContext(ctx, "SELECT LAST_INSERT_ID(?)", leftover); err != nil {
			t.Fatal(err)
		}
		if err := fence.Claim(ctx, tx, "r", 40, "a"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("leftover %d: stale claim answered %v", leftover, err)
		}
		if err := fence.ClaimExisting(ctx, tx, "r", 40, "a", ""); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("leftover %d: stale ClaimExisting answered %v", leftover, err)
		}
		// No row matches: the server sends 0, never the session's value.
		if err := fence.ClaimExisting(ctx, tx, "absent", 40, "a", ""); !errors.Is(err, fence.ErrNoFence) {
			t.Fatalf("leftover %d: ClaimExisting without a row answered %v, want ErrNoFence", leftover, err)
		}
		if tok, err := fence.ClaimNextExisting(ctx, tx, "absent", "a", ""); tok != 0 || !errors.Is(err, fence.ErrNoFence) {
			t.Fatalf("leftover %d: ClaimNextExisting without a row answered %d, %v; want ErrNoFence", leftover, tok, err)
		}
		if err := fence.Claim(ctx, tx, "new", 40, "a"); err != nil {
			t.Fatalf("leftover %d: claim of a new resource: %v", leftover, err)
		}
		_ = tx.Rollback()
	}
}

// TestClaimOnEnsuredRow checks that a row made by Ensure (token 0) accepts the
// first real claim, and that Ensure leaves an existing fence alone.
func TestClaimOnEnsuredRow(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	if err := fence.Ensure(ctx, db, "e"); err != nil {
		t.Fatal(err)
	}
	if f := lookup(t, db, "e"); f.Token != 0 || f.Claims != 0 || f.Owner != "" {
		t.Fatalf("ensured row: %+v", f)
	}
	if err := claimCommitted(t, db, "e", 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Ensure(ctx, db, "e"); err != nil {
		t.Fatal(err)
	}
	if f := lookup(t, db, "e"); f.Token != 1 || f.Claims != 1 || f.Owner != "a" {
		t.Fatalf("Ensure changed a claimed row: %+v", f)
	}
}

func TestLookupMissing(t *testing.T) {
	db := newDB(t)
	if _, err := fence.Lookup(ctxT(t), db, "never"); !errors.Is(err, fence.ErrNoFence) {
		t.Fatalf("Lookup of a missing resource: %v, want ErrNoFence", err)
	}
}

// TestLookupParseTimeIndependent checks Lookup on DSNs with and without
// parseTime and with a non-UTC loc.
func TestLookupParseTimeIndependent(t *testing.T) {
	_, dsn := newDBWithDSN(t)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range []func(*mysql.Config){
		func(c *mysql.Config) { c.ParseTime = false },
		func(c *mysql.Config) { c.ParseTime = true },
		func(c *mysql.Config) { c.ParseTime = true; c.Loc = tokyo },
	} {
		db := openWith(t, dsn, edit)
		if err := claimCommitted(t, db, "t", 1, "a"); err != nil && !errors.Is(err, fence.ErrStale) {
			t.Fatal(err)
		}
		f := lookup(t, db, "t")
		if age := time.Since(f.UpdatedAt); f.Token != 1 || age < -time.Minute || age > time.Hour {
			t.Fatalf("%+v (updated_at %v ago)", f, age)
		}
	}
}

var _ fence.Querier = (*sqlx.Tx)(nil)
