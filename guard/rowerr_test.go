package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redfence/redfence/guard"
)

// A deadlock reported through QueryRowContext (it reaches fn only as the
// row's Scan error) rolled fn's transaction back. A fn that ignores the
// error and writes on must not have that write run outside the transaction,
// autocommitted and unfenced: Do refuses it, retries the attempt, and the
// ignored write never lands.
func TestDeadlockSeenOnlyByScanEndsTheAttempt(t *testing.T) {
	for _, variant := range []string{"QueryRowContext", "QueryRowxContext"} {
		t.Run(variant, func(t *testing.T) {
			var retries []error
			e := newEnv(t, envConfig{guard: &guard.Options{Hooks: guard.Hooks{
				OnRetry: func(key string, attempt int, err error) { retries = append(retries, err) },
			}}})
			ctx := context.Background()
			ptx := heavyTx(t, e)

			plainDone := make(chan error, 1)
			var scanErr, writeErr error
			err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
				if tx.Attempt() > 1 {
					return nil
				}
				if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1"); err != nil {
					return err
				}
				go func() {
					_, err := ptx.ExecContext(context.Background(), "UPDATE counters SET n = n + 10 WHERE id = 1")
					if err == nil {
						err = ptx.Commit()
					}
					plainDone <- err
				}()
				waitFor(t, "the plain transaction to wait for fn's row", func() bool {
					return e.running("UPDATE counters SET n = n + 10 WHERE id = 1") == 1
				})
				var n int
				const q = "SELECT n FROM counters WHERE id = 2 FOR UPDATE"
				if variant == "QueryRowContext" {
					scanErr = tx.QueryRowContext(ctx, q).Scan(&n)
				} else {
					scanErr = tx.QueryRowxContext(ctx, q).Scan(&n)
				}
				// A careless fn: the error is dropped and the work goes on.
				_, writeErr = tx.ExecContext(ctx, "UPDATE counters SET n = n + 100 WHERE id = 3 OR id = 2")
				return nil
			})
			must(t, err)
			must(t, <-plainDone)
			if mysqlErrno(scanErr) != 1213 {
				t.Fatalf("Scan error = %v, want the deadlock (1213)", scanErr)
			}
			if writeErr == nil || !errors.Is(writeErr, scanErr) {
				t.Fatalf("write after the ignored deadlock: err = %v, want it refused naming the deadlock", writeErr)
			}
			if len(retries) != 1 || mysqlErrno(retries[0]) != 1213 {
				t.Fatalf("retries = %v, want one, for the deadlock", retries)
			}
			if a, b := e.counter(1), e.counter(2); a != 10 || b != 10 {
				t.Fatalf("counters = %d, %d; want 10, 10 (only the plain transaction's writes)", a, b)
			}
		})
	}
}
