package main

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/internal/testenv"
)

// talliedDB opens a pool on the test's own database whose transactions are
// counted in the returned tally.
func talliedDB(t *testing.T) (*sql.DB, *txTally) {
	t.Helper()
	_, dsn := testenv.MySQLWithDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tally := &txTally{}
	db := sql.OpenDB(&talliedConnector{Connector: conn, tally: tally})
	t.Cleanup(func() { _ = db.Close() })
	return db, tally
}

func current(t *testing.T, tally *txTally) txCount {
	t.Helper()
	tally.mu.Lock()
	defer tally.mu.Unlock()
	return tally.open
}

func count(hot, cold, none int) txCount {
	return txCount{by: [nClasses + 1]int{hot, cold, none}, all: hot + cold + none}
}

func TestTallyCountsTransactionsByClassUntilTheirConnectionIsReleased(t *testing.T) {
	db, tally := talliedDB(t)
	ctx := t.Context()
	begin := func(ctx context.Context) *sql.Tx {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	h1 := begin(withClass(ctx, hot))
	h2 := begin(withClass(ctx, hot))
	c1 := begin(withClass(ctx, cold))
	other := begin(ctx)
	if got, want := current(t, tally), count(2, 1, 1); got != want {
		t.Fatalf("open transactions by class (hot, cold, none): %v, want %v", got, want)
	}

	if err := h1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := c1.Rollback(); err != nil {
		t.Fatal(err)
	}
	// COMMIT sent as a statement (as guard.Do does when its ctx can end)
	// keeps the connection until the transaction is released.
	if _, err := h2.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if got, want := current(t, tally), count(1, 0, 1); got != want {
		t.Fatalf("after a commit, a rollback and a COMMIT statement: %v, want %v", got, want)
	}
	if err := h2.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := current(t, tally); got != (txCount{}) {
		t.Fatalf("after every transaction ended: %v open, want none", got)
	}
	if got, _ := tally.peaks(); got != count(2, 1, 1) {
		t.Fatalf("peaks: %v, want %v", got, count(2, 1, 1))
	}
	tally.resetPeaks()
	if got, active := tally.peaks(); got != (txCount{}) || active != (txCount{}) {
		t.Fatalf("peaks after reset with nothing open: %v (before COMMIT: %v), want none", got, active)
	}
	// Statements outside a transaction are not counted.
	if _, err := db.ExecContext(withClass(ctx, hot), "DO 1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := tally.peaks(); got != (txCount{}) {
		t.Fatalf("a statement outside a transaction was counted: %v", got)
	}
}

func activeNow(t *testing.T, tally *txTally) txCount {
	t.Helper()
	tally.mu.Lock()
	defer tally.mu.Unlock()
	return tally.active
}

func TestTallyCountsApartTransactionsThatSentTheirEnd(t *testing.T) {
	db, tally := talliedDB(t)
	ctx := withClass(t.Context(), hot)
	var txs []*sql.Tx
	for range 3 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	if got, want := activeNow(t, tally), count(3, 0, 0); got != want {
		t.Fatalf("before any COMMIT: %v, want %v", got, want)
	}
	// A COMMIT sent as a statement: the connection is still held (counted
	// in open) until the transaction is released, but no longer active.
	if _, err := txs[0].ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if got, want := activeNow(t, tally), count(2, 0, 0); got != want {
		t.Fatalf("after a COMMIT statement: active %v, want %v", got, want)
	}
	if got, want := current(t, tally), count(3, 0, 0); got != want {
		t.Fatalf("after a COMMIT statement: open %v, want %v", got, want)
	}
	if err := txs[0].Rollback(); err != nil {
		t.Fatal(err)
	}
	// So is a ROLLBACK sent as a statement (guard's redfence_rollback(…)
	// likewise), read as a query here.
	rows, err := txs[1].QueryContext(ctx, "ROLLBACK")
	if err != nil {
		t.Fatal(err)
	}
	_ = rows.Close()
	if got, want := activeNow(t, tally), count(1, 0, 0); got != want {
		t.Fatalf("after a ROLLBACK statement: active %v, want %v", got, want)
	}
	if err := txs[1].Commit(); err != nil {
		t.Fatal(err)
	}
	if err := txs[2].Rollback(); err != nil {
		t.Fatal(err)
	}
	if got, active := current(t, tally), activeNow(t, tally); got != (txCount{}) || active != (txCount{}) {
		t.Fatalf("after every transaction ended: open %v, active %v, want none", got, active)
	}
	if open, active := tally.peaks(); open != count(3, 0, 0) || active != count(3, 0, 0) {
		t.Fatalf("peaks: open %v, active %v, want 3 hot each", open, active)
	}
}
