package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
)

// A retried attempt claims the fence row again in both hand-off modes. With
// the lock handed on at the claim a retry takes a new turn and token; with
// HandOffAtEnd it keeps the token, and must still claim: a claim skipped
// because the token equals one this process claimed before would leave fn
// unfenced, its row showing the rolled-back attempt's state.
func TestRetriedAttemptClaimsAgainInBothHandOffModes(t *testing.T) {
	for _, mode := range []string{"at-claim", "at-end"} {
		t.Run(mode, func(t *testing.T) {
			opt := guard.Options{BackoffMin: time.Millisecond}
			if mode == "at-end" {
				opt = *atEnd(opt)
			}
			e := newEnv(t, envConfig{guard: &opt})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil })) // the fence row
			before, err := e.fence("k")
			must(t, err)

			var tokens []uint64
			var ops []string
			err = e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
				tokens, ops = append(tokens, tx.Token()), append(ops, tx.OpID())
				f, err := fence.Lookup(ctx, tx, e.g.FenceResource("k"))
				if err != nil {
					return err
				}
				if f.Token != tx.Token() || f.OpID != tx.OpID() {
					t.Errorf("attempt %d sees fence token %d op %q; want its own claim, token %d op %q",
						tx.Attempt(), f.Token, f.OpID, tx.Token(), tx.OpID())
				}
				if err := increment(ctx, tx, 1); err != nil {
					return err
				}
				if tx.Attempt() == 1 {
					// A deadlock-class error of the transaction's own
					// statement: Do rolls back and runs fn again.
					_, err := tx.ExecContext(ctx, "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'deadlock'")
					return err
				}
				return nil
			})
			must(t, err)
			if len(ops) != 2 {
				t.Fatalf("fn ran %d times, want 2", len(ops))
			}
			if mode == "at-end" && tokens[0] != tokens[1] {
				t.Fatalf("tokens %v: with HandOffAtEnd a retry keeps its token", tokens)
			}
			if mode == "at-claim" && tokens[1] <= tokens[0] {
				t.Fatalf("tokens %v: with the lock handed on at the claim a retry takes a new, higher one", tokens)
			}
			after, err := e.fence("k")
			must(t, err)
			if after.OpID != ops[1] || after.Token != tokens[1] || after.Claims != before.Claims+1 {
				t.Fatalf("fence after commit: token %d op %q claims %d; want attempt 2's token %d and op %q, claims %d",
					after.Token, after.OpID, after.Claims, tokens[1], ops[1], before.Claims+1)
			}
			if n := e.counter(1); n != 1 {
				t.Fatalf("counter %d, want 1: the first attempt's write must be rolled back", n)
			}
		})
	}
}
