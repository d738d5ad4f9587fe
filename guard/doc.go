// Package guard runs a function as a critical section that is safe across
// many application instances: [Guard.Do] takes a fair Redis lock for a key,
// opens a MySQL transaction whose first statement claims the key's fence row
// with the lock's fencing token, passes the lock on to the key's next waiter
// (the fence row's lock, held until the transaction ends, now keeps that
// waiter out), runs the function inside that transaction and commits.
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
//     the transaction is lost or the caller's ctx ends, which stops fn's
//     statements (with the lock held until the transaction ends,
//     [HandOffAtEnd]: also as soon as the lock is lost; see below).
//   - Return every error of tx's statements. Do rolls back when fn returns an
//     error and returns that error (wrapped). Never commit or roll back tx
//     yourself: [Tx.Commit] and [Tx.Rollback] refuse with [ErrTxManaged].
//   - Run only statements that stay inside the transaction. A statement that
//     would end it (START TRANSACTION, COMMIT, ROLLBACK, DDL such as CREATE
//     TABLE, LOCK TABLES, SET autocommit and the other statements that commit
//     implicitly) would commit the claim early and let what follows run
//     unfenced: tx's methods refuse it with [ErrImplicitCommit] before it is
//     sent, and Do rolls back and returns that error. A stored procedure
//     (CALL) that ends the transaction is caught right after it returns.
//     Statements run on the embedded *sqlx.Tx directly are not watched.
//   - fn may run more than once. When one of tx's statements fails with a
//     deadlock, a lock wait timeout, a write conflict under snapshot
//     isolation or a lost connection, the server has
//     rolled the transaction (or the statement) back: tx refuses further
//     statements, and when fn returns that error (or nil) Do rolls back and
//     runs the whole transaction again, up to Options.MaxAttempts times,
//     under a new turn of the lock and a new token (with [HandOffAtEnd],
//     under the same lock and token). Errors of fn's own making are never retried,
//     whatever their type (an io.EOF from a parser, a net.Error from an HTTP
//     call, an error of another transaction). Keep side effects outside the
//     database (messages, HTTP calls) out of fn or make them idempotent.
//   - Do not keep tx after fn returns.
//
// # Outcomes
//
// Do returns nil exactly when the transaction committed. Errors:
// [ErrFenced] (also [fence.ErrStale]; fn was not called and nothing was
// written), [ErrLockLost] (the lock was lost before the claim held the fence
// row or, with [HandOffAtEnd], while fn ran; rolled back),
// [ErrNotCommitted] (the transaction is known not to have committed: safe to
// retry), [ErrOutcomeUnknown] (the connection died during COMMIT and the
// outcome could not be settled, or a statement [Tx] does not see, or an
// opaque one, may have left work applied outside the fence; see [Tx]),
// [ErrReentry] (a nested call on a held key
// through a Guard with another database or Locker), errors of fn, of the lock
// and of the database, and input errors ([ErrNilFunc], [ErrInvalidKey],
// [ErrInvalidGuard], [ErrNilContext]) returned before anything is touched.
// Do returns by the time the caller's ctx ends, even when Redis or MySQL
// does not answer: the COMMIT and ROLLBACK are bound to ctx too, and a
// connection that does not answer by then is closed. When that happens
// during COMMIT, Do settles the outcome from the fence row within about a
// second more and returns nil, [ErrNotCommitted] or [ErrOutcomeUnknown].
//
// With [HandOffAtEnd], if the lock is lost after fn returned nil but before
// COMMIT, Do still commits. This is safe: the transaction holds the fence row's lock since its
// claim, so the next holder's claim waits for this commit and then reads its
// writes; no update is lost and nothing is applied twice. Do then returns nil
// (the work is durable) and reports the loss through Hooks.OnLost.
//
// # Fence rows
//
// Do claims with fence.ClaimExisting (in database mode, where the claim
// mints the token, fence.ClaimNextExisting), which never creates a fence
// row: a first claim that created the row inside a transaction which then
// rolled back could deadlock other transactions waiting for that row. A Do
// that finds no row (with a lock, the key's first Do ever; in database
// mode, each caller that arrives before the row exists) rolls back, creates
// the row on the pool (fence.Ensure) and claims again, in the same attempt.
// Every other Do pays nothing for it: no read before the transaction,
// however many keys there are.
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
//
// Two hazards of nesting on different keys:
//   - The nested transaction needs a connection of its own while the
//     enclosing one holds its connection, and, with the lock handed on at
//     the claim (the default), the enclosing key's next holder holds one
//     too, its claim waiting for the enclosing transaction. With
//     sql.DB.SetMaxOpenConns too small for the calls of one chain (twice
//     the nesting depth by default, the nesting depth with [HandOffAtEnd]),
//     Do refuses with [ErrNestedPool]; under concurrency a small pool can
//     still run dry and stall nested calls up to innodb_lock_wait_timeout,
//     so size it for twice the callers times the nesting depth.
//   - The nested transaction must not touch rows the enclosing one wrote: it
//     runs on another connection, waits for the enclosing transaction's row
//     locks, and the enclosing transaction waits for it. InnoDB cannot see
//     that cycle; the nested statement fails after innodb_lock_wait_timeout
//     (50 s by default), once per nested attempt. The enclosing Do never
//     retries a nested Do's failure: only failures of its own transaction's
//     statements are retried.
//
// # When Redis is unavailable
//
// With Options.Fallback set to [FallbackDatabase], a Guard keeps running
// critical sections while Redis is away. A circuit breaker counts failures
// of Redis (lock calls failing for Redis's own reasons, and health probes:
// a PING while a caller waits for the lock longer than
// Options.FallbackProbeAfter); after Options.FallbackAfter in a row, calls
// go straight to the database ([ModeDatabase]): the fence row's lock
// serialises the callers, and the claim mints the token, max(stored + 1,
// the database clock in µs), so tokens keep growing across both modes and
// a Redis-mode holder and a database-mode holder are serialised like any
// two holders. Database-mode callers wait holding a connection, so they are
// capped per key and per Guard (Options.FallbackMaxWaitersPerKey,
// FallbackMaxWaiters); callers over the caps wait without one and fail with
// [ErrFallbackLimit] when their ctx ends. Options.FallbackRetry after the
// switch, a PING on the side tells whether Redis is back; when it answers,
// calls use the fair lock again. Switches are logged and reported to
// Hooks.OnModeChange; [Result].Mode tells each call's mode. Safety is kept;
// fairness and connection-free waiting are lost while in database mode.
//
// # Batching
//
// With Options.MaxBatch above 1, the callers of one key in one process
// that arrive while the key's current batch waits for or holds the lock
// form the next batch, up to MaxBatch callers, and that batch takes one
// lock turn, begins one transaction, claims the fence row once, runs each
// caller's fn in turn (in arrival order, each on its caller's goroutine)
// and commits once. A hot key then pays the lock hand-off, BEGIN, claim
// and COMMIT once per batch instead of once per caller; a key with no
// queue behind its holder runs exactly as without batching. Only the head
// batch waits in the Redis queue, so batching does not take turns from
// other processes.
//
// What stays the same: Do returns nil exactly when the caller's own work
// committed, fn's ctx ends when the caller's ctx ends or the transaction is
// lost (with [HandOffAtEnd], also when the lock is), and fn never runs
// concurrently with another fn of the key while both transactions are
// alive.
//
// What it costs and changes:
//   - An fn that returns an error (or panics) has its work undone and only
//     its caller gets the error (or the panic, on its own goroutine); the
//     others' work commits. By default the batch runs its fns without
//     savepoints and, on such an error, rolls the transaction back and
//     runs the other fns again (those before the failed one run twice),
//     each inside a savepoint from then on. With Options.BatchSavepoints,
//     each fn runs inside a savepoint from the start: one more round trip
//     per caller, and nothing runs twice.
//   - The callers of a batch share its fate otherwise: a failure of the
//     transaction's own statements (deadlock, lock wait timeout, lost
//     connection), in any fn, runs every fn of the batch again, up to
//     Options.MaxAttempts; a statement that ends the transaction
//     ([ErrImplicitCommit]) fails every caller ([ErrNotCommitted] for the
//     others, or [ErrOutcomeUnknown] when it ended the transaction after
//     their work); a stale token gives every caller [ErrFenced]; a failed
//     COMMIT gives every caller the same outcome. A caller's ctx that ends
//     while one of its statements runs closes the shared connection, and
//     the others run again.
//   - A caller waits for the whole batch: the fns before and after its own,
//     the COMMIT and the unlock. A caller whose ctx ends first leaves: with
//     its ctx's error when its fn had not run (nothing was touched), with
//     [ErrOutcomeUnknown] when its work waits for the batch's COMMIT. The
//     batch's own lock wait and transaction do not depend on any one
//     caller's ctx; when every caller has left, the batch gives up its
//     place in the queue, or cuts its COMMIT short and settles it, as one
//     caller's Do does when its ctx ends.
//   - Keys, tokens and transactions are shared, so Tx.Token, Tx.OpID and
//     Tx.Attempt are the batch's. Do inside fn on the same key joins the
//     batch's transaction, as it joins an enclosing Do. The batch's own
//     statements (BEGIN, claim, COMMIT) and its lock calls run on a ctx
//     with the values of the ctx of the caller that opened the batch.
//   - Hooks: OnDo, OnStep and OnDone are per caller. Each caller's OnStep
//     reports its lock wait, the batch's claims, COMMIT and unlock, and its
//     own fn, with their own times, on its own goroutine as its Do returns;
//     a caller that leaves early reports an unlock of its own, of zero
//     length. OnAcquired, OnRetry, OnFenced, OnLost and OnCommitted are per
//     batch, called on the batch's goroutine.
//   - While Redis is unavailable (Options.Fallback), callers run in database
//     mode one by one, without batching.
//
// Use it for keys that are hot in one process (a flash sale on one row)
// when fn is short and its errors are rare; leave it off when fns are
// long, when one caller's latency must not include others' work, or when
// the keys are rarely contended (it then brings nothing).
//
// # When the lock is handed on
//
// Do passes the Redis lock on to the key's next waiter as soon as its claim
// holds the fence row, before fn runs ([HandOffAuto], the default, on a
// database whose peers take no writes; [HandOffAtClaim] asks for it
// explicitly). The fence row's lock, which the transaction keeps until it
// ends, then keeps the next holder out: that holder's lock grant, BEGIN and
// claim run while fn and COMMIT do, its claim returns the moment this
// transaction commits or rolls back, and it reads what this one wrote. The
// serial path of a hot key is the database's own: claim, fn's statements,
// COMMIT. fn never runs concurrently with another fn of the key while both
// transactions are alive, since the next fn starts only after its claim.
//
// What that means for fn and for Do's callers:
//   - fn's ctx ends when the transaction is lost (a deadlock, a lock wait
//     timeout, a lost connection, a statement that ended it) or the caller's
//     ctx ends, not when the lock's lease does: the transaction's end lets
//     the next holder in at once, while the lease, already given up, no
//     longer matters. Keep side effects outside the database out of fn, as
//     always: a transaction the server ends under a running fn lets the
//     next holder's fn start before this one has returned, and this one's
//     statements are then refused.
//   - A retry of an attempt that failed after the hand-off takes a new turn
//     in the queue, behind the callers that arrived meanwhile, and a new
//     token: the next holder may already have claimed the row with a newer
//     one. Hooks.OnAcquired and the StepLock of Hooks.OnStep come once per
//     turn.
//   - At most two transactions of a key are open at once: one running fn,
//     one whose claim waits. Briefly, a third connection may be out of the
//     pool: one that committed and is being released, or, with relaying,
//     a chained transaction parked (at most 50ms) for the key's next
//     caller when the one after it took a connection from the pool first. The waiting one holds a database connection, and a holder
//     stopped inside fn delays it until its transaction ends, or up to
//     innodb_lock_wait_timeout per attempt, after which the waiting Do
//     retries like after any lock wait timeout.
//   - When the connection dies during COMMIT, the next holder's claim, which
//     was waiting for the row, goes through as soon as the server has ended
//     the transaction, so the check that settles the outcome more often
//     finds a newer token and returns [ErrOutcomeUnknown] rather than nil or
//     [ErrNotCommitted].
//   - Every Guard that takes the same Redis lock (the same Locker prefix
//     and key) must claim the same fence row in the same database: the same
//     Namespace and pool. Guards that share a lock but fence in different
//     databases or namespaces would run fn at once.
//   - A Do nested in fn on another key needs two connections per enclosing
//     call: its own transaction, and the enclosing key's next holder's claim
//     waiting on the enclosing fence row ([ErrNestedPool] refuses one the
//     pool cannot serve).
//
// Row locks do not reach across the members of a cluster where several take
// writes: on a Galera node or a Group Replication member in multi-primary
// mode (found by the pool check, see [Guard.CheckDatabase]), HandOffAuto
// holds the lock until the transaction ends, and HandOffAtClaim is refused
// ([ErrUnsafePool]); on any other such setup, set HandOffAtEnd.
//
// The next holder's claim waits for the row at most innodb_lock_wait_timeout
// (50 s by default) per attempt: an fn that runs longer makes the key's
// waiting callers retry and fail after Options.MaxAttempts. Keep
// transactions short, or use HandOffAtEnd for long ones, whose waiters wait
// in the Redis queue as long as their ctx allows.
//
// [HandOffAtEnd] holds the lock until the transaction ends everywhere: fn's ctx
// then also ends when the lease is lost ([ErrLockLost]), a retry keeps its
// turn and token, and only the holder of a key holds a connection; but the
// unlock, the next holder's grant, BEGIN and claim join the serial path,
// which about halves a hot key's throughput (see bench/README.md).
//
// With Options.MaxBatch, a batch hands the lock on once its claim holds the
// row, and the next batch of the key in this process starts its turn then,
// rather than after the COMMIT; a batch whose attempt fails after the
// hand-off (including one that rolls back to run again without a failed
// member) takes a new turn and token. It does not apply in database mode.
//
// # Relaying transactions between a key's callers
//
// A holder that begins its transaction on the pool queues for a connection
// behind every other caller doing so; beside busy cold keys, that wait can
// dominate a hot key's serial path. So a Do that commits while another Do
// on the same key is under way in this process commits with COMMIT AND
// CHAIN, which begins a new transaction in the same round trip, and hands
// that open transaction to the next caller of the key here, which sends its
// claim at once: no BEGIN, no wait for the pool, and no release of the
// finished transaction on the path. A chained transaction has read nothing,
// so its snapshot, like that of a fresh one, is taken after the claim. A
// caller that finds none waiting for it takes whichever comes first, a
// relayed one or the pool's, and one nobody takes within 50ms is rolled
// back, which returns its connection to the pool. A connection is relayed
// for at most half a second; then it is committed with a plain COMMIT and
// goes back to the pool, and the key's next caller queues for one like
// everybody else, so a busy key never shuts the pool's other users out,
// even when the pool has no more connections than busy keys. A hot key then
// keeps about two connections out of the pool while it has callers, and a
// cold key none. With the lock handed on at the claim, the hot key's throughput
// beside busy cold keys comes close to that of the hot key alone (see
// bench/README.md). With Options.MaxBatch, each batch counts as one caller:
// a committing batch chains its transaction to the key's next batch in this
// process. Options.NoRelay turns relaying off: every transaction then
// begins on the pool.
//
// # Namespaces
//
// A key's fence row is shared by every Guard whose Locker uses the same
// prefix. Lockers with different prefixes (two applications sharing one
// schema) hold separate locks on a key, so their fence rows are separate too:
// Options.Namespace, which defaults to the Locker's prefix, names them (see
// [Guard.FenceResource]). Guards that must exclude each other need Lockers
// with the same prefix.
package guard
