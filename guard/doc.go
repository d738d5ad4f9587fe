// Package guard runs a function as a critical section that is safe across
// many application instances: [Guard.Do] takes a fair Redis lock for a key,
// opens a MySQL transaction whose first statement claims the key's fence row
// with the lock's fencing token, runs the function inside that transaction,
// commits and unlocks.
//
// Redis gives fairness and efficiency: callers wait in the lock's FIFO queue
// without holding a database connection. MySQL is the final arbiter of safety:
// because the claim is checked by the database inside the same transaction as
// the guarded writes, a holder whose lock silently expired (a long GC pause, a
// network partition, a Redis failover) cannot overwrite the work of the next
// holder. Its claim is rejected ([ErrFenced]) or, when it claimed first, the
// next holder's claim waits for its commit and reads its writes.
//
// # Using Do
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
//   - Use the ctx fn receives for every statement. It is cancelled as soon as
//     the lock is lost or the caller's ctx ends, which stops fn's statements.
//   - Return every error of tx's statements. After a deadlock the server has
//     already rolled the transaction back, and statements that follow would
//     run outside it, unfenced. Do rolls back when fn returns an error and
//     returns that error (wrapped). Never commit or roll back tx
//     yourself: [Tx.Commit] and [Tx.Rollback] refuse with [ErrTxManaged].
//   - fn may run more than once. Deadlocks, lock wait timeouts and
//     connections lost before COMMIT roll the transaction back and run it
//     again, under the same lock and token, up to Options.MaxAttempts times.
//     Keep side effects outside the database (messages, HTTP calls) out of fn
//     or make them idempotent.
//   - Do not keep tx after fn returns.
//
// # Outcomes
//
// Do returns nil exactly when the transaction committed. Errors:
// [ErrFenced] (also [fence.ErrStale]; fn was not called and nothing was
// written), [ErrLockLost] (the lock was lost while fn ran; rolled back),
// [ErrNotCommitted] (the transaction is known not to have committed: safe to
// retry), [ErrOutcomeUnknown] (the connection died during COMMIT and the
// outcome could not be settled), [ErrReentry] (a nested call on a held key
// through a Guard with another database or Locker), errors of fn, of the lock
// and of the database, and input errors ([ErrNilFunc], [ErrInvalidKey],
// [ErrInvalidGuard], [ErrNilContext]) returned before anything is touched.
// Do returns by the time the caller's ctx ends, even when Redis does not
// answer.
//
// If the lock is lost after fn returned nil but before COMMIT, Do still
// commits. This is safe: the transaction holds the fence row's lock since its
// claim, so the next holder's claim waits for this commit and then reads its
// writes; no update is lost and nothing is applied twice. Do then returns nil
// (the work is durable) and reports the loss through Hooks.OnLost.
//
// # Fence rows
//
// The first Do on a key in a process creates the key's fence row, if it does
// not exist yet, before beginning the transaction (one read, and an insert
// the first time ever; see fence.Ensure). A first claim that created the row
// inside a transaction which then rolled back could otherwise deadlock other
// transactions waiting for that row.
//
// While a transaction holds the fence row, the next holder's claim waits for
// it, even when the first holder's lock was lost: a holder that froze inside
// fn (a GC pause, a stopped process) delays the next one until its
// transaction ends, or until the next one's lock wait times out on the server
// (innodb_lock_wait_timeout) and Do retries. Keep transactions short.
//
// # Nesting
//
// Do called inside fn, with fn's ctx, on the same key joins the outer call:
// same transaction, same token, no new lock. The nested fn runs inside a
// savepoint, so a nested call that returns an error leaves none of its
// writes behind. On a different key, Do acquires that key's lock normally and
// runs a separate transaction that commits on its own, before the outer one.
// Acquire keys in one consistent order everywhere (for example sorted) or two
// callers nesting in opposite orders will wait for each other until their
// contexts end. Calling Do for the same key with a ctx that does not come
// from fn waits for the lock the caller already holds.
package guard
