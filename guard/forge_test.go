package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redfence/redfence/guard"
)

// fn cannot forge the mark that proves the transaction: the savepoint's name
// is the Guard's secret, so rolling back to a guessed name, making it
// again in a transaction of fn's own, or calling guard's procedures does
// not pass for the transaction that claimed; and fn's changes to guard's
// session variables cannot make the COMMIT fail after it committed.
func TestFnCannotForgeTheTransactionMark(t *testing.T) {
	for _, c := range []struct {
		name  string
		stmts []string // through the embedded *sqlx.Tx, errors ignored
		want  error    // nil: Do commits, with the claim
	}{
		{name: "rollback-to-a-guessed-mark", stmts: []string{"ROLLBACK TO SAVEPOINT redfence_tx"}},
		{name: "session-variable-cleared", stmts: []string{"SET @redfence_session = NULL"}},
		{name: "session-variable-garbled", stmts: []string{"SET @redfence_session = 'x,y'"}},
		{name: "commit-and-chain-with-a-guessed-mark", want: guard.ErrImplicitCommit, stmts: []string{
			"SET completion_type = 0", "COMMIT AND CHAIN", "SAVEPOINT redfence_tx"}},
		{name: "rollback-and-chain-with-a-guessed-mark", want: guard.ErrNotCommitted, stmts: []string{
			"SET completion_type = 0", "ROLLBACK AND CHAIN", "SAVEPOINT redfence_tx"}},
		{name: "guard's-chain-procedure-with-a-guessed-mark", stmts: []string{"CALL redfence_commit_chain('redfence_tx')"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, ctx := fencedEnv(t, envConfig{guard: &guard.Options{MaxAttempts: 1}}, "forge")
			var op string
			err := e.g.Do(ctx, "forge", func(ctx context.Context, tx *guard.Tx) error {
				op = tx.OpID()
				if err := increment(ctx, tx, 2); err != nil {
					return err
				}
				for _, q := range c.stmts {
					_, _ = tx.Tx.ExecContext(ctx, q)
				}
				_, _ = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 1")
				return nil
			})
			f, ferr := e.fence("forge")
			must(t, ferr)
			n1, n2 := e.counter(1), e.counter(2)
			switch {
			case c.want == nil:
				if err != nil || f.OpID != op || n1 != 1000 || n2 != 1 {
					t.Fatalf("Do = %v, fence op %q (ours %q), counters %d and %d; want nil, our claim, 1000 and 1", err, f.OpID, op, n1, n2)
				}
			default:
				if err == nil || !errors.Is(err, c.want) {
					t.Fatalf("Do = %v, want %v", err, c.want)
				}
				if n1 != 0 {
					t.Fatalf("counter 1 = %d, want 0: fn's write after the end of the claiming transaction committed", n1)
				}
			}
			// The pool is fit for the next caller: a plain Do commits.
			must(t, e.g.Do(ctx, "forge", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) }))
		})
	}
}
