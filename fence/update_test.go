package fence_test

import (
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
)

const accountsDDL = "CREATE TABLE accounts (" +
	" id INT PRIMARY KEY, balance INT NOT NULL," +
	" fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0, fence_owner VARBINARY(191) NOT NULL DEFAULT ''," +
	" version BIGINT UNSIGNED NOT NULL DEFAULT 0)"

// TestUpdateToken checks the token-column helper with the rule of Claim,
// including a rewrite with identical values (0 affected rows without
// clientFoundRows) and a LAST_INSERT_ID left in the session.
func TestUpdateToken(t *testing.T) {
	_, dsn := newDBWithDSN(t)
	for name, edit := range map[string]func(*mysql.Config){
		"default":         func(*mysql.Config) {},
		"clientFoundRows": func(c *mysql.Config) { c.ClientFoundRows = true },
	} {
		t.Run(name, func(t *testing.T) {
			db := openWith(t, dsn, edit)
			ctx := ctxT(t)
			testenv.MustExec(t, db, "DROP TABLE IF EXISTS accounts")
			testenv.MustExec(t, db, accountsDDL)
			testenv.MustExec(t, db, "INSERT INTO accounts (id, balance) VALUES (1, 100)")
			set := func(balance int) fence.Update {
				return fence.Update{Table: "accounts", Set: "balance = ?", SetArgs: []any{balance}, Where: "id = ?", WhereArgs: []any{1}}
			}
			row := func() (balance int, token uint64, owner string) {
				t.Helper()
				if err := db.QueryRowContext(ctx, "SELECT balance, fence_token, fence_owner FROM accounts WHERE id = 1").Scan(&balance, &token, &owner); err != nil {
					t.Fatal(err)
				}
				return
			}

			if err := fence.UpdateToken(ctx, db, set(90), 7, "a"); err != nil {
				t.Fatalf("first write: %v", err)
			}
			// Same token, same owner, same values: nothing changes on disk.
			if err := fence.UpdateToken(ctx, db, set(90), 7, "a"); err != nil {
				t.Fatalf("identical rewrite: %v", err)
			}
			if err := fence.UpdateToken(ctx, db, set(80), 8, "b"); err != nil {
				t.Fatalf("greater token: %v", err)
			}
			for _, c := range []struct {
				token uint64
				owner string
			}{{7, "a"}, {8, "a"}} {
				// A LAST_INSERT_ID equal to the token is left in the session
				// and must not be read as success.
				conn, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := conn.ExecContext(ctx, "SELECT LAST_INSERT_ID(?)", c.token); err != nil {
					t.Fatal(err)
				}
				err = fence.UpdateToken(ctx, conn, set(1), c.token, c.owner)
				_ = conn.Close()
				var se *fence.StaleError
				if !errors.As(err, &se) || se.Current != 8 || se.CurrentOwner != "b" || se.Token != c.token {
					t.Fatalf("token %d by %s: %v", c.token, c.owner, err)
				}
			}
			if b, tok, o := row(); b != 80 || tok != 8 || o != "b" {
				t.Fatalf("row after stale writes: %d %d %q", b, tok, o)
			}
			u := set(1)
			u.WhereArgs = []any{2}
			if err := fence.UpdateToken(ctx, db, u, 99, "a"); !errors.Is(err, fence.ErrNoRow) {
				t.Fatalf("missing row: %v", err)
			}
		})
	}
}

func TestUpdateVersion(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	testenv.MustExec(t, db, accountsDDL)
	testenv.MustExec(t, db, "INSERT INTO accounts (id, balance) VALUES (1, 100)")
	u := fence.Update{Table: "accounts", Set: "balance = balance - ?", SetArgs: []any{10}, Where: "id = ?", WhereArgs: []any{1}}

	v, err := fence.UpdateVersion(ctx, db, u, 0)
	if err != nil || v != 1 {
		t.Fatalf("first update: %d, %v", v, err)
	}
	_, err = fence.UpdateVersion(ctx, db, u, 0)
	var ce *fence.ConflictError
	if !errors.Is(err, fence.ErrConflict) || !errors.As(err, &ce) || ce.Expected != 0 || ce.Current != 1 {
		t.Fatalf("outdated version: %v", err)
	}
	if v, err = fence.UpdateVersion(ctx, db, u, 1); err != nil || v != 2 {
		t.Fatalf("second update: %d, %v", v, err)
	}
	var balance int
	if err := db.GetContext(ctx, &balance, "SELECT balance FROM accounts WHERE id = 1"); err != nil || balance != 80 {
		t.Fatalf("balance %d (%v), want 80: the conflicting update must not have applied", balance, err)
	}
	u.WhereArgs = []any{2}
	if _, err := fence.UpdateVersion(ctx, db, u, 0); !errors.Is(err, fence.ErrNoRow) {
		t.Fatalf("missing row: %v", err)
	}
	if _, err := fence.UpdateVersion(ctx, db, fence.Update{Table: "accounts"}, 0); err == nil {
		t.Fatal("an Update without Set and Where was accepted")
	}
}
