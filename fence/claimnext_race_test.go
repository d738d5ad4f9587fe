package fence_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
)

// TestClaimNextMintsUnderRace: callers mint tokens for one resource at once,
// each logging its token in its own transaction. In commit order the tokens
// must increase strictly, each minted token must be max(stored + 1, the
// server's clock in µs): never below the clock read before it, and, once a
// Claim has stored a token from the future, exactly one above the token
// before it (the clock is behind). Every claim names the one it replaced.
//
// It catches a mint that ignores the clock (stored + 1 only: a row left
// at a low token would hand out tokens a Redis holder, whose tokens follow
// the clock, has long passed), one that ignores the stored token (the clock
// only: below a token from the future, so tokens go backwards), one that
// reuses the stored token (GREATEST(token, clock): a token repeated after
// one from the future), and minting outside the row lock (duplicates).
func TestClaimNextMintsUnderRace(t *testing.T) {
	db := newDB(t)
	db.SetMaxOpenConns(12)
	ctx := ctxT(t)
	testenv.MustExec(t, db, "CREATE TABLE mint_log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL,"+
		" clock BIGINT UNSIGNED NOT NULL, op VARCHAR(32) NOT NULL)")
	const res = "mint-race"
	// A low token from Claim: the clock is far ahead of stored + 1.
	if err := claimCommitted(t, db, res, 5, "redis-mode"); err != nil {
		t.Fatal(err)
	}
	mintAll := func(t *testing.T, phase string, mint mintFunc) {
		t.Helper()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 6 {
					if err := mintLogged(ctx, db, res, mint, fmt.Sprintf("%s-%d-%d", phase, g, i)); err != nil {
						t.Errorf("%s: %v", phase, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	mintAll(t, "clock", fence.ClaimNext)

	// A token from the future, accepted by Claim; the clock is behind it.
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := claimCommitted(t, db, res, future, "redis-mode"); err != nil {
		t.Fatal(err)
	}
	mintAll(t, "future", fence.ClaimNextExisting)

	var log []struct {
		Seq   int64  `db:"seq"`
		Token uint64 `db:"token"`
		Clock uint64 `db:"clock"`
		Op    string `db:"op"`
	}
	if err := db.SelectContext(ctx, &log, "SELECT seq, token, clock, op FROM mint_log ORDER BY seq"); err != nil {
		t.Fatal(err)
	}
	if len(log) != 2*8*6 {
		t.Fatalf("%d mints logged, want %d", len(log), 2*8*6)
	}
	prev := uint64(5)
	for i, l := range log {
		switch {
		case l.Token <= prev:
			t.Fatalf("mint %d (%s): token %d after %d: not strictly increasing", i, l.Op, l.Token, prev)
		case i < len(log)/2 && l.Token < l.Clock:
			t.Fatalf("mint %d (%s): token %d below the server clock %d read before it", i, l.Op, l.Token, l.Clock)
		case i == len(log)/2 && l.Token != future+1:
			t.Fatalf("first mint after the future token %d: %d, want %d", future, l.Token, future+1)
		case i > len(log)/2 && l.Token != prev+1:
			t.Fatalf("mint %d (%s) behind the clock: %d after %d, want %d", i, l.Op, l.Token, prev, prev+1)
		}
		prev = l.Token
	}
	last := log[len(log)-1]
	before := log[len(log)-2]
	if f := lookup(t, db, res); f.Token != last.Token || f.OpID != last.Op || f.PrevToken != before.Token || f.PrevOpID != before.Op ||
		f.Claims != uint64(len(log)+2) {
		t.Fatalf("fence %+v, want token %d op %s, replacing %d op %s, after %d claims", f, last.Token, last.Op, before.Token, before.Op, len(log)+2)
	}
}

// mintLogged mints a token for res in a transaction of its own and logs it
// with the server's clock read just before, in the same transaction.
func mintLogged(ctx context.Context, db *sqlx.DB, res string, mint mintFunc, op string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var clock uint64
	// Read on the pool, not in tx: the claim must be tx's first statement.
	if err := db.GetContext(ctx, &clock, "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)"); err != nil {
		return err
	}
	tok, err := mint(ctx, tx, res, "db-mode", op)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO mint_log (token, clock, op) VALUES (?, ?, ?)", tok, clock, op); err != nil {
		return err
	}
	return tx.Commit()
}
