package guard_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redfence/redfence/guard"
)

// A statement fn prepares on its Tx is closed when the transaction ends,
// as database/sql promises for a Tx: without RelayConns at COMMIT. With
// RelayConns the *sql.Tx does not end at a COMMIT AND CHAIN, so every
// statement prepared by the callers of a hot key stays open on the server
// (and in the sql.Tx) for as long as the chain of relayed transactions
// lasts, toward max_prepared_stmt_count, which is server-wide. With
// MaxBatch, the statements of a batch's members are closed as the batch
// ends.
func TestRelayPreparedStmtsClosedAtCommit(t *testing.T) {
	for _, batch := range []int{0, 3} {
		for _, relay := range []bool{false, true} {
			t.Run(fmt.Sprintf("relay=%v,MaxBatch=%d", relay, batch), func(t *testing.T) {
				testRelayPreparedStmtsClosedAtCommit(t, relay, batch)
			})
		}
	}
}

func testRelayPreparedStmtsClosedAtCommit(t *testing.T, relay bool, maxBatch int) {
	e := newEnv(t, envConfig{guard: &guard.Options{NoRelay: !relay, HandOff: guard.HandOffAtClaim, MaxBatch: maxBatch}})
	ctx := context.Background()
	var maxOpen atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
					st, err := tx.PreparexContext(ctx, "SELECT n FROM counters WHERE id = ?")
					if err != nil {
						return err
					}
					var n int
					if err := st.GetContext(ctx, &n, 1); err != nil {
						return err
					}
					// Left to the end of the transaction, as database/sql allows.
					open, err := openStmts(ctx, tx)
					if err != nil {
						return err
					}
					for {
						m := maxOpen.Load()
						if open <= m || maxOpen.CompareAndSwap(m, open) {
							break
						}
					}
					return increment(ctx, tx, 1)
				}))
			}
		}()
	}
	wg.Wait()
	// Each Do prepares one statement and openStmts sees it with
	// those of the members before it in the batch (and, with
	// hand-off, possibly of one more).
	if m := maxOpen.Load(); m > 2*int64(max(maxBatch, 1)) {
		t.Fatalf("up to %d prepared statements open on a transaction's connection: those of earlier Do calls were never closed", m)
	}
}

// openStmts is how many prepared statements the session holds.
func openStmts(ctx context.Context, tx *guard.Tx) (int64, error) {
	var name string
	var prep, closed int64
	if err := tx.QueryRowxContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &prep); err != nil {
		return 0, err
	}
	if err := tx.QueryRowxContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_close'").Scan(&name, &closed); err != nil {
		return 0, err
	}
	return prep - closed, nil
}
