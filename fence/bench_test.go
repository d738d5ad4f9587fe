package fence_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
)

// The benchmarks compare a transaction doing one UPDATE with the same
// transaction preceded by Claim on an existing fence row (the common case),
// on one connection of the local server. Run them together, e.g.
//
//	go test -run '^$' -bench 'Tx' -benchtime 3s ./fence/
//
// BenchmarkTxSideBySide alternates both in one loop and reports the ratio,
// so that load from other processes affects both sides equally.

func benchDB(b *testing.B, interpolate bool) *sqlx.DB {
	b.Helper()
	_, dsn := newDBWithDSN(b)
	db := openWith(b, dsn, func(c *mysql.Config) { c.InterpolateParams = interpolate })
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	testenv.MustExec(b, db, "CREATE TABLE stock (id INT PRIMARY KEY, qty BIGINT NOT NULL)")
	testenv.MustExec(b, db, "INSERT INTO stock VALUES (1, 0)")
	if err := claimCommitted(b, db, "stock:1", 1, "bench"); err != nil {
		b.Fatal(err)
	}
	return db
}

func bareTx(ctx context.Context, db *sqlx.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty + ? WHERE id = ?", 1, 1); err != nil {
		return err
	}
	return tx.Commit()
}

func claimTx(ctx context.Context, db *sqlx.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fence.Claim(ctx, tx, "stock:1", 1, "bench"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty + ? WHERE id = ?", 1, 1); err != nil {
		return err
	}
	return tx.Commit()
}

func runTx(b *testing.B, fn func(context.Context, *sqlx.DB) error, interpolate bool) {
	db := benchDB(b, interpolate)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := fn(ctx, db); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTxBare(b *testing.B)  { runTx(b, bareTx, false) }
func BenchmarkTxClaim(b *testing.B) { runTx(b, claimTx, false) }

func BenchmarkTxSideBySide(b *testing.B) {
	for _, interpolate := range []bool{false, true} {
		name := "preparedStatements"
		if interpolate {
			name = "interpolateParams"
		}
		b.Run(name, func(b *testing.B) {
			db := benchDB(b, interpolate)
			ctx := context.Background()
			var bare, claim time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if err := bareTx(ctx, db); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := claimTx(ctx, db); err != nil {
					b.Fatal(err)
				}
				bare += t1.Sub(t0)
				claim += time.Since(t1)
			}
			n := float64(b.N)
			b.ReportMetric(float64(bare.Nanoseconds())/n, "bare-ns/tx")
			b.ReportMetric(float64(claim.Nanoseconds())/n, "claim-ns/tx")
			b.ReportMetric(float64(claim)/float64(bare), "ratio")
		})
	}
}
