package guard

// errors.go owns the errors Do returns, for errors.Is.

import "errors"

var (
	// ErrFenced is returned when the database rejected the lock's fencing
	// token: a newer holder has claimed the key (typically after a Redis
	// failover lost the grant). fn was not called and nothing was written.
	// The error also matches [fence.ErrStale], and errors.As extracts the
	// *fence.StaleError with the database's current token. Do has raised the
	// key's token floor in Redis, so the next call gets an accepted token.
	ErrFenced = errors.New("guard: fenced")

	// ErrNilFunc is returned by Do when fn is nil.
	ErrNilFunc = errors.New("guard: nil fn")

	// ErrNilContext is returned by Do when ctx is nil.
	ErrNilContext = errors.New("guard: nil context")

	// ErrInvalidKey is returned by Do for a key that is empty, longer than
	// redislock.MaxKeyLen bytes or not valid UTF-8. The error also matches
	// redislock.ErrInvalidKey.
	ErrInvalidKey = errors.New("guard: invalid key")

	// ErrInvalidGuard is returned by Do on a nil or zero Guard, or one built
	// by [New] with a nil Locker, a nil DB or invalid [Options]; the error
	// text names the problem. [Guard.Err] returns the same error right after
	// New.
	ErrInvalidGuard = errors.New("guard: invalid guard")

	// ErrInvalidOptions is returned (together with [ErrInvalidGuard]) by Do
	// and [Guard.Err] on a Guard built with invalid [Options]; the error names
	// the field and its value (see [OptionError]).
	ErrInvalidOptions = errors.New("guard: invalid options")

	// ErrLockLost is returned when the lock was lost (lease expired, deleted,
	// Redis unreachable for longer than the lease) before the claim held the
	// fence row, or, with HandOffAtEnd, while fn ran; the transaction was
	// rolled back. The error
	// also matches the lock's own error (redislock.ErrLost).
	ErrLockLost = errors.New("guard: lock lost")

	// ErrNotCommitted is returned when COMMIT failed and the transaction is
	// known not to have committed, including when the connection died during
	// COMMIT and the fence row showed the commit did not happen. Nothing of
	// the attempt was applied; calling Do again is safe.
	ErrNotCommitted = errors.New("guard: not committed")

	// ErrOutcomeUnknown is returned when the connection died during COMMIT
	// and Do could not find out whether the transaction committed (the
	// database stayed unreachable, or a newer holder claimed the key before
	// the check); when the server rolled the transaction back on an error
	// of a statement fn prepared, bound or ran through Unsafe, which [Tx]
	// does not see (statements of that kind that ran after the rollback may
	// have applied, outside the fence); and when an opaque statement (CALL
	// and the like) may have ended the transaction and neither the check
	// savepoint nor the fence row can tell (see [Tx]). Check the data
	// before retrying. It never wraps an error that fence.Retryable or
	// fence.IsConnectionLost accepts.
	ErrOutcomeUnknown = errors.New("guard: commit outcome unknown")

	// ErrTxManaged is returned by [Tx.Commit] and [Tx.Rollback]: Do commits
	// or rolls back the transaction when fn returns.
	ErrTxManaged = errors.New("guard: transaction is managed by Do; return from fn instead")

	// ErrImplicitCommit is returned by [Tx]'s statement methods for a
	// statement that would end the fenced transaction (START TRANSACTION,
	// COMMIT, DDL and other statements that commit implicitly), which is not
	// sent, and by Do when such a statement was attempted or when an opaque
	// statement (CALL, EXECUTE) ended the transaction. Do rolls back what is
	// left and never returns nil in that case: writes made after the
	// transaction ended would not be fenced.
	ErrImplicitCommit = errors.New("guard: statement ends the fenced transaction")

	// ErrNestedPool is returned by Do called inside fn on another key when
	// the database pool cannot give the nested transaction a connection of
	// its own: the enclosing calls, and with the lock handed on at the claim
	// their keys' next holders waiting on their fence rows, hold every
	// connection sql.DB.SetMaxOpenConns allows, so the nested call would
	// wait forever.
	ErrNestedPool = errors.New("guard: nested call on another key needs a connection the enclosing calls hold")

	// ErrUnsafePool is returned by Do, before anything is locked or written,
	// when the database pool cannot keep fn's statements inside the fenced
	// transaction: the pool reaches a Galera node and the driver prepares
	// statements on the server (go-sql-driver/mysql's default). A
	// brute-force abort that lands on such a PREPARE is not reported, and
	// the statements after it would commit one by one, unfenced. Set
	// interpolateParams=true in the DSN. It is also returned when
	// Options.HandOff is HandOffAtClaim or Options.Fallback is
	// FallbackDatabase and the pool reaches a server whose peers also take
	// writes (a Galera node, Group Replication in multi-primary mode), whose
	// row locks cannot keep the next holder out.
	// The first Do of a Guard checks its pool once.
	ErrUnsafePool = errors.New("guard: the database pool cannot keep fn inside the fenced transaction")

	// ErrFallbackLimit is returned by Do in database mode (Options.Fallback)
	// when ctx ended while the caller waited, holding no connection, for one
	// of the database-mode slots that Options.FallbackMaxWaiters and
	// FallbackMaxWaitersPerKey bound. Nothing was touched.
	ErrFallbackLimit = errors.New("guard: ctx ended waiting for a database-mode slot")

	// ErrReentry is returned by Do called inside fn (with fn's ctx) on the
	// key the outer call holds, through a different Guard whose database or
	// locker differs: joining would use the wrong transaction, and locking
	// again would wait for the caller's own lock.
	ErrReentry = errors.New("guard: conflicting nested call on a held key")
)
