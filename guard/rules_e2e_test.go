package guard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// A clone of a Do's grant (another owner presenting the same token, as a
// process that replays a grant would) is kept apart by the equal-token rule,
// whichever claims first: when the clone's claim commits first, Do is
// fenced (ErrFenced) and fn never runs; when Do claims first, the clone's
// claim waits for Do's transaction and is then stale, naming Do's token and
// owner, and the row keeps Do's claim.
//
// It catches a fence that accepts an equal token from any owner (both
// writes would apply under one token) and a guard that claims with an owner
// other than the lock's or retries a fence by an equal token.
func TestCloneOfGrantFencedEndToEnd(t *testing.T) {
	t.Run("clone first", func(t *testing.T) {
		var e *env
		var cloneErr error
		var armed atomic.Bool
		e = newEnv(t, envConfig{guard: &guard.Options{Hooks: guard.Hooks{
			OnAcquired: func(key string, token uint64, _ time.Duration) {
				if armed.CompareAndSwap(true, false) {
					cloneErr = cloneClaim(e, key, token)
				}
			},
		}}})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		must(t, e.g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return nil }))
		armed.Store(true)
		ran := false
		err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { ran = true; return increment(ctx, tx, 1) })
		if cloneErr != nil {
			t.Fatalf("clone claim: %v", cloneErr)
		}
		if !errors.Is(err, guard.ErrFenced) || ran || e.counter(1) != 0 {
			t.Fatalf("Do after a clone claimed its token = %v (fn ran: %v, counter %d); want ErrFenced, fn not run", err, ran, e.counter(1))
		}
		if f, err := e.fence("k"); err != nil || f.Owner != "clone" {
			t.Fatalf("fence %+v %v, want the clone's claim", f, err)
		}
	})
	t.Run("Do first", func(t *testing.T) {
		e := newEnv(t, envConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		must(t, e.g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return nil }))
		var token uint64
		var owner, opID string
		clone := make(chan error, 1)
		err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			token, owner, opID = tx.Token(), tx.Owner(), tx.OpID()
			go func() { clone <- cloneClaim(e, "k", token) }()
			waitFor(t, "the clone's claim to wait for Do's fence row", func() bool {
				return e.running("INSERT INTO "+fence.Table) == 1
			})
			return increment(ctx, tx, 1)
		})
		must(t, err)
		var se *fence.StaleError
		if cerr := <-clone; !errors.As(cerr, &se) || se.Current != token || se.CurrentOwner != owner {
			t.Fatalf("clone's claim of token %d after Do's = %v, want a *StaleError naming %d and %q", token, cerr, token, owner)
		}
		if f, err := e.fence("k"); err != nil || f.OpID != opID || e.counter(1) != 1 {
			t.Fatalf("fence %+v %v, counter %d; want Do's claim (op %s) and 1", f, err, e.counter(1), opID)
		}
	})
}

// cloneClaim claims key's fence row with token under the owner "clone", in
// a transaction of its own that commits when the claim is accepted.
func cloneClaim(e *env, key string, token uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tx, err := e.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fence.ClaimOp(ctx, tx, e.g.FenceResource(key), token, "clone", "clone-op"); err != nil {
		return err
	}
	return tx.Commit()
}

// In database mode every Do's claim mints its token: max(stored + 1, the
// server's clock in µs). Concurrent Do's, logging their tokens in their
// transactions, must see them increase strictly in commit order, never
// below the server's clock; after a Redis-mode holder's token from the
// future, exactly one above the token before.
//
// It catches a database mode that mints from the clock alone (tokens below
// a future token, so its writes would follow a newer holder's), from the
// stored token alone (tokens Redis holders passed long ago), or reuses the
// stored token.
func TestDatabaseModeMintsEndToEnd(t *testing.T) {
	f := newFBEnv(t, guard.Options{FallbackAfter: 1, FallbackRetry: time.Minute})
	f.srv.Kill()
	testenv.MustExec(t, f.db, "CREATE TABLE mint_log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL)")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must(t, f.do(t, 10*time.Second)) // into database mode; the row exists
	var clock uint64
	must(t, f.db.GetContext(ctx, &clock, "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)"))

	run := func() {
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				for range 4 {
					err := f.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
						_, err := tx.ExecContext(ctx, "INSERT INTO mint_log (token) VALUES (?)", tx.Token())
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run()
	// A Redis-mode holder's token from the future.
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	tx, err := f.db.BeginTxx(ctx, nil)
	must(t, err)
	must(t, fence.ClaimOp(ctx, tx, f.g.FenceResource("k"), future, "redis-holder", "op-future"))
	must(t, tx.Commit())
	run()

	var tokens []uint64
	must(t, f.db.SelectContext(ctx, &tokens, "SELECT token FROM mint_log ORDER BY seq"))
	if len(tokens) != 2*6*4 {
		t.Fatalf("%d Do's logged, want %d", len(tokens), 2*6*4)
	}
	half := len(tokens) / 2
	for i, tok := range tokens {
		switch {
		case i < half && tok < clock:
			t.Fatalf("Do %d: token %d below the server clock %d read before", i, tok, clock)
		case i > 0 && i != half && i < half && tok <= tokens[i-1]:
			t.Fatalf("Do %d: token %d after %d: not strictly increasing", i, tok, tokens[i-1])
		case i == half && tok != future+1:
			t.Fatalf("first Do after the future token %d: %d, want %d", future, tok, future+1)
		case i > half && tok != tokens[i-1]+1:
			t.Fatalf("Do %d behind the clock: token %d after %d, want %d", i, tok, tokens[i-1], tokens[i-1]+1)
		}
	}
}
