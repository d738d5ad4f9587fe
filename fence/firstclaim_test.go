package fence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/redfence/redfence/fence"
)

// TestFirstClaimConcurrent: 32 goroutines claim the same never-seen
// resources at once, under REPEATABLE READ and READ COMMITTED. Each claim
// must be accepted or stale: no deadlock, duplicate key or lock wait error.
// Accepted transactions commit (with Ensure first, half of them roll back
// instead, which is the case Ensure exists for).
func TestFirstClaimConcurrent(t *testing.T) {
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelReadCommitted} {
		for _, ensure := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/ensure=%v", iso, ensure), func(t *testing.T) {
				db := newDB(t)
				db.SetMaxOpenConns(40)
				ctx := ctxT(t)
				const goroutines, resources = 32, 12
				var mu sync.Mutex
				outcomes := map[string]int{}
				maxAccepted := map[string]uint64{}
				for r := range resources {
					res := fmt.Sprintf("new:%d", r)
					if ensure {
						if err := fence.Ensure(ctx, db, res); err != nil {
							t.Fatal(err)
						}
					}
					var wg sync.WaitGroup
					for g := range goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							token := uint64(1 + rand.IntN(8))
							tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
							if err != nil {
								t.Error(err)
								return
							}
							err = fence.Claim(ctx, tx, res, token, fmt.Sprint("g", g))
							rollback := err != nil || (ensure && rand.IntN(2) == 0)
							if rollback {
								_ = tx.Rollback()
							} else if cerr := tx.Commit(); cerr != nil {
								t.Error(cerr)
							}
							mu.Lock()
							defer mu.Unlock()
							switch {
							case err == nil:
								outcomes["accepted"]++
								if !rollback {
									maxAccepted[res] = max(maxAccepted[res], token)
								}
							case errors.Is(err, fence.ErrStale):
								outcomes["stale"]++
							default:
								t.Errorf("claim %s token %d: %v (MySQL error %d)", res, token, err, mysqlErrNumber(err))
							}
						}()
					}
					wg.Wait()
				}
				t.Logf("%v", outcomes)
				if outcomes["accepted"]+outcomes["stale"] != goroutines*resources {
					t.Fatalf("outcomes %v", outcomes)
				}
				for res, tok := range maxAccepted {
					if f := lookup(t, db, res); f.Token != tok {
						t.Errorf("%s: fence holds %d, highest committed claim was %d", res, f.Token, tok)
					}
				}
			})
		}
	}
}

// TestFirstClaimRollbackHazard pins down why Ensure exists. A transaction
// creates a fence row by claiming a new resource, two others queue behind it
// on the same resource, and the first rolls back. Without Ensure, InnoDB
// turns the waiters' locks into gap locks and their inserts deadlock: one of
// them gets error 1213, which Retryable accepts. With the row created by
// Ensure beforehand, the rollback deletes nothing and both waiters succeed.
func TestFirstClaimRollbackHazard(t *testing.T) {
	for _, ensure := range []bool{false, true} {
		t.Run(fmt.Sprintf("ensure=%v", ensure), func(t *testing.T) {
			db := newDB(t)
			ctx := ctxT(t)
			if ensure {
				if err := fence.Ensure(ctx, db, "fresh"); err != nil {
					t.Fatal(err)
				}
			}
			creator := begin(t, db, nil)
			if err := fence.Claim(ctx, creator, "fresh", 1, "c"); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 2)
			for i, token := range []uint64{2, 3} {
				tx, id, closeTx, err := connTx(ctx, db, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer closeTx()
				claimed := make(chan error, 1)
				go func() { claimed <- fence.Claim(ctx, tx, "fresh", token, fmt.Sprint("w", i)) }()
				stop := make(chan struct{})
				go func() {
					err := <-claimed
					close(stop)
					if err == nil {
						err = tx.Commit()
					}
					errs <- err
				}()
				waitLockWait(t, db, id, stop)
			}
			if err := creator.Rollback(); err != nil {
				t.Fatal(err)
			}
			var deadlocks, ok int
			for range 2 {
				switch err := <-errs; {
				case err == nil:
					ok++
				case mysqlErrNumber(err) == 1213 && fence.Retryable(err):
					deadlocks++
				default:
					t.Errorf("waiter: %v", err)
				}
			}
			if ensure && ok != 2 {
				t.Fatalf("with Ensure: %d waiters succeeded, %d deadlocked; want 2 and 0", ok, deadlocks)
			}
			if !ensure && deadlocks != 1 {
				t.Fatalf("without Ensure: %d waiters succeeded, %d deadlocked; the hazard Ensure documents did not show (want 1 deadlock)", ok, deadlocks)
			}
		})
	}
}
