package fence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testenv"
)

// TestClaimSerialisesHolders: holder A (token 5) claims and writes in an open
// transaction; holder B (token 6) claims in another and must wait for A's
// transaction; once A commits, B's claim returns and B's reads, made after
// the claim, see A's write. A token 5 arriving afterwards is rejected.
func TestClaimSerialisesHolders(t *testing.T) {
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelReadCommitted} {
		t.Run(iso.String(), func(t *testing.T) {
			db := newDB(t)
			ctx := ctxT(t)
			testenv.MustExec(t, db, "CREATE TABLE stock (id INT PRIMARY KEY, qty INT NOT NULL)")
			testenv.MustExec(t, db, "INSERT INTO stock VALUES (1, 10)")
			if err := claimCommitted(t, db, "item:1", 4, "z"); err != nil {
				t.Fatal(err)
			}

			txA := begin(t, db, &sql.TxOptions{Isolation: iso})
			if err := fence.Claim(ctx, txA, "item:1", 5, "A"); err != nil {
				t.Fatal(err)
			}
			if _, err := txA.ExecContext(ctx, "UPDATE stock SET qty = qty - 3 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}

			txB, idB, closeB, err := connTx(ctx, db, &sql.TxOptions{Isolation: iso})
			if err != nil {
				t.Fatal(err)
			}
			defer closeB()
			claimed := make(chan error, 1)
			go func() { claimed <- fence.Claim(ctx, txB, "item:1", 6, "B") }()
			stop := make(chan struct{})
			go func() { err := <-claimed; close(stop); claimed <- err }()

			waitLockWait(t, db, idB, stop) // B is blocked in Claim by A's row lock
			commit(t, txA)
			if err := <-claimed; err != nil {
				t.Fatalf("B after A committed: %v", err)
			}
			var qty int
			if err := txB.QueryRowContext(ctx, "SELECT qty FROM stock WHERE id = 1").Scan(&qty); err != nil {
				t.Fatal(err)
			}
			if qty != 7 {
				t.Fatalf("B read qty %d after its claim, want 7 (A's write)", qty)
			}
			commit(t, txB)

			err = claimCommitted(t, db, "item:1", 5, "A")
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Current != 6 || se.CurrentOwner != "B" {
				t.Fatalf("old token after a newer one: %v", err)
			}
		})
	}
}

// TestReadBeforeClaimIsStale shows why Claim must come first: under
// REPEATABLE READ, a read made before Claim fixes the snapshot, and the
// transaction keeps reading data older than the previous holder's commit
// even though its own claim is accepted after that commit.
func TestReadBeforeClaimIsStale(t *testing.T) {
	db := newDB(t)
	ctx := ctxT(t)
	testenv.MustExec(t, db, "CREATE TABLE stock (id INT PRIMARY KEY, qty INT NOT NULL)")
	testenv.MustExec(t, db, "INSERT INTO stock VALUES (1, 10)")
	if err := fence.Ensure(ctx, db, "item:1"); err != nil {
		t.Fatal(err)
	}

	txA := begin(t, db, nil)
	if err := fence.Claim(ctx, txA, "item:1", 5, "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := txA.ExecContext(ctx, "UPDATE stock SET qty = 7 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}

	txB, idB, closeB, err := connTx(ctx, db, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer closeB()
	var early int
	if err := txB.QueryRowContext(ctx, "SELECT qty FROM stock WHERE id = 1").Scan(&early); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan error, 1)
	go func() { claimed <- fence.Claim(ctx, txB, "item:1", 6, "B") }()
	stop := make(chan struct{})
	go func() { err := <-claimed; close(stop); claimed <- err }()
	waitLockWait(t, db, idB, stop)
	commit(t, txA)
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	var late int
	if err := txB.QueryRowContext(ctx, "SELECT qty FROM stock WHERE id = 1").Scan(&late); err != nil {
		t.Fatal(err)
	}
	if early != 10 || late != 10 {
		t.Fatalf("read before claim %d, after claim %d: expected both to show the old 10", early, late)
	}
}

// TestClaimOrderMatchesTokenOrder: many holders with random tokens race on
// one resource; every accepted transaction appends its token to a log in the
// same transaction. Because accepted claims are serialised by the fence row,
// the log in commit order must never go backwards.
func TestClaimOrderMatchesTokenOrder(t *testing.T) {
	db := newDB(t)
	db.SetMaxOpenConns(24)
	ctx := ctxT(t)
	testenv.MustExec(t, db, "CREATE TABLE log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL)")
	if err := fence.Ensure(ctx, db, "hot"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, stale := 0, 0
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				token := uint64(1 + rand.IntN(200))
				err := func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					if err := fence.Claim(ctx, tx, "hot", token, fmt.Sprint("g", g)); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, "INSERT INTO log (token) VALUES (?)", token); err != nil {
						return err
					}
					return tx.Commit()
				}()
				mu.Lock()
				switch {
				case err == nil:
					accepted++
				case errors.Is(err, fence.ErrStale):
					stale++
				default:
					t.Errorf("claim %d: %v", token, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var tokens []uint64
	if err := db.SelectContext(ctx, &tokens, "SELECT token FROM log ORDER BY seq"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] < tokens[i-1] {
			t.Fatalf("log goes backwards at %d: %v", i, tokens)
		}
	}
	if len(tokens) != accepted || accepted == 0 || stale == 0 {
		t.Fatalf("accepted %d, stale %d, logged %d", accepted, stale, len(tokens))
	}
	if f := lookup(t, db, "hot"); f.Token != tokens[len(tokens)-1] || f.Claims != uint64(accepted) {
		t.Fatalf("fence %+v after %d accepted claims ending with %d", f, accepted, tokens[len(tokens)-1])
	}
}
