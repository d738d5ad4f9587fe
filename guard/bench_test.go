package guard_test

import (
	"context"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// The uncontended cost of Do, step by step, on one key: run with
//
//	go test -run '^$' -bench . -benchtime 2000x ./guard/
//
// BareTx is BEGIN; UPDATE; COMMIT. ClaimTx adds the fence claim, LockUnlock
// is the Redis lock alone, Do is everything. bench/guardbench prints the
// ratios and round-trip counts side by side.

func newBenchEnv(b *testing.B) *env {
	b.Helper()
	return newEnv(b, envConfig{})
}

const benchUpdate = "UPDATE counters SET n = n + 1 WHERE id = 1"

func BenchmarkBareTx(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	for b.Loop() {
		tx, err := e.db.BeginTxx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, benchUpdate); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClaimTx(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	var token uint64 = 1
	for b.Loop() {
		tx, err := e.db.BeginTxx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		token++
		if err := fence.ClaimOp(ctx, tx, "k", token, "owner", "op"); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, benchUpdate); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLockUnlock(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	for b.Loop() {
		lk, err := e.locker.Lock(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDo(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	fn := func(ctx context.Context, tx *guard.Tx) error {
		_, err := tx.ExecContext(ctx, benchUpdate)
		return err
	}
	for b.Loop() {
		if err := e.g.Do(ctx, "k", fn); err != nil {
			b.Fatal(err)
		}
	}
}
