// Package guard runs a function as a critical section that is safe across
// many application instances. [Guard.Do] takes a fair Redis lock for a key,
// opens a MySQL transaction whose first statement claims the key's fence row
// with the lock's fencing token, runs the function in that transaction and
// commits. A holder whose lock expired unnoticed (a GC pause, a Redis
// failover) cannot overwrite the next holder's work: the database rejects
// its claim, or makes the next holder wait for its commit.
//
// # Using Do
//
//	g := guard.New(locker, db, nil) // once per process; migrations.Apply creates the fence table
//
//	err := g.Do(ctx, "sku:42", func(ctx context.Context, tx *guard.Tx) error {
//		var stock int
//		if err := tx.GetContext(ctx, &stock, "SELECT stock FROM items WHERE sku = ?", 42); err != nil {
//			return err
//		}
//		if stock == 0 {
//			return ErrSoldOut
//		}
//		_, err := tx.ExecContext(ctx, "UPDATE items SET stock = stock - 1 WHERE sku = ?", 42)
//		return err
//	})
//
// Rules for fn:
//   - Run every statement on tx with the ctx fn receives: it ends when the
//     transaction is lost or the caller's ctx ends.
//   - Return every error of tx's statements. Never commit or roll back tx:
//     Do does ([ErrTxManaged]).
//   - Run only statements that stay inside the transaction: tx refuses one
//     that would end it (COMMIT, DDL, LOCK TABLES, ...) with
//     [ErrImplicitCommit]; see [Tx].
//   - fn may run more than once: after a deadlock, a lock wait timeout or a
//     lost connection, Do runs the whole transaction again, up to
//     Options.MaxAttempts. Keep effects outside the database (messages,
//     HTTP calls) out of fn, or make them idempotent.
//   - Do not keep tx after fn returns.
//
// # Outcomes
//
// Do returns nil exactly when the transaction committed. Otherwise, tell
// three cases apart with errors.Is:
//   - Fenced, [ErrFenced]: a newer holder had claimed the key; nothing of
//     this call was written. Do raised the key's token floor, so the next
//     call gets an accepted token.
//   - Not committed, safe to call again: [ErrNotCommitted], [ErrLockLost],
//     [ErrFallbackLimit], errors of the lock (Redis down, ctx ended while
//     queued) and fn's own errors: nothing of the attempt was applied.
//   - Outcome unknown, check the data before calling again:
//     [ErrOutcomeUnknown] (the connection died during COMMIT and the fence
//     row could not tell, or statements [Tx] does not see may have run
//     outside the fence) and [ErrImplicitCommit] (a statement of fn ended
//     the transaction: what ran before it may have committed).
//
// Errors of use or setup ([ErrNilContext], [ErrNilFunc], [ErrInvalidKey],
// [ErrInvalidGuard], [ErrReentry], [ErrNestedPool], [ErrUnsafePool]) come
// back before the call locks or writes anything. Do returns by the time ctx
// ends, even when a server does not answer (after settling an interrupted
// COMMIT for about a second more).
//
// # Options
//
// Options.Succession sets when the lock passes to the key's next waiter
// (at the claim, or with [HandOffAtEnd] at the transaction's end);
// Options.Batch lets the callers of a hot key in one process share a
// transaction; Options.Outage keeps Do running on the database alone while
// Redis is down; Options.Hooks reports every step. Called inside fn with
// fn's ctx, Do on the same key joins the enclosing transaction.
// [Guard.DoRead] sends fn's first read with the claim.
//
// # How a Do runs
//
// In the source, in call order: do.go (input, nesting, the server check;
// read.go for DoRead), turn.go (the lock; early.go begins beside it),
// attempt.go (one path for every call), claim.go, session.go (the
// server's proof), tx.go (fn's statements, ride.go),
// commit.go, settle.go (what a failure means); beside them relay.go,
// spare.go, batch.go, batch_run.go and fallback.go.
//
// How Do works and what each choice costs is in the design note,
// docs/design.md in the repository:
// https://github.com/redfence/redfence/blob/main/docs/design.md
package guard
