// Package fence makes MySQL the final judge of which lock holder may write:
// inside the business transaction, [Claim] checks the holder's fencing token
// against a fence row, so the database itself rejects a stale holder's write.
//
// # Supported servers
//
// MySQL 8.0 and later, MariaDB 10.6 and later (tested on MariaDB 10.11). The
// statements avoid what the two disagree on: VALUES() and row aliases in ON
// DUPLICATE KEY UPDATE, RETURNING, and affected-row counts that depend on the
// clientFoundRows setting. Tables are InnoDB, created by package migrations.
//
// # Use
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	if err := fence.Claim(ctx, tx, "stock:42", token, owner); err != nil {
//		tx.Rollback() // stale holder, or a database error (see Retryable)
//		return err
//	}
//	// reads and writes of the critical section, then tx.Commit()
//
// Claim must be the first statement of the transaction (see [Claim] for why).
// The fence row stays locked until the transaction ends, which orders every
// holder's transaction after the previous holder's commit.
//
// Claim creates the fence row of a new resource itself. Calling [Ensure] on
// the pool before the first claim of a resource (or before every
// transaction: it is one non-locking read when the row exists) makes first
// claims deadlock-free even when the creating transaction rolls back while
// others wait; see [Ensure]. [ClaimExisting] and [ClaimNextExisting] get
// the same without the read: they never create the row and return
// [ErrNoFence] when there is none, and the caller then rolls back, runs
// Ensure and claims again, once per resource.
//
// # Other checks
//
// Tables that carry their own guard column can be updated with
// [UpdateToken] (a fencing-token column, same acceptance rule as Claim) or
// [UpdateVersion] (an optimistic version column).
//
// # Retries
//
// [Retryable] tells which errors are worth running the whole transaction
// again (deadlock, lock wait timeout, connection lost before COMMIT);
// [IsConnectionLost] tells the case where a COMMIT's outcome is unknown,
// which [ClaimOp] and [Lookup] settle.
package fence
