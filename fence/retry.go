package fence

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// MySQL server error numbers that Retryable recognises.
const (
	erLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT: only the statement was rolled back
	erLockDeadlock    = 1213 // ER_LOCK_DEADLOCK: the whole transaction was rolled back
	// ER_CHECKREAD: a write to a row changed since the transaction's
	// snapshot (MariaDB's innodb_snapshot_isolation); the whole transaction
	// was rolled back.
	erCheckRead = 1020
	// The server is going away or has killed this connection: the
	// transaction is gone with it.
	erServerShutdown = 1053 // ER_SERVER_SHUTDOWN
	erConnKilled     = 1927 // ER_CONNECTION_KILLED (MariaDB)
	erClientInteract = 4031 // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+): idle connection closed
)

// Retryable reports whether err, returned by a statement of a transaction
// (other than COMMIT), is worth running the WHOLE transaction again, on a
// fresh transaction, after rolling the failed one back explicitly:
//
//   - deadlock (1213): InnoDB chose this transaction as the victim and rolled
//     it back;
//   - a write conflict under snapshot isolation (1020, "Record has changed
//     since last read", MariaDB with innodb_snapshot_isolation on): the
//     transaction was rolled back;
//   - lock wait timeout (1205): only the statement was rolled back
//     (innodb_rollback_on_timeout is off by default) and the transaction
//     still holds its earlier locks, so it must be rolled back before
//     retrying;
//   - the connection was lost ([IsConnectionLost]) before COMMIT was sent:
//     the server rolls the transaction back when it notices.
//
// Everything else is not retryable: duplicate keys, syntax and other server
// errors, [ErrStale] and [ErrConflict] (retrying with the same token cannot
// succeed), bad input, and context cancellation or deadline (the caller gave
// up). A connection lost during COMMIT is reported by [IsConnectionLost] but
// the outcome is then unknown: settle it with [Lookup] before retrying.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrStale) || errors.Is(err, ErrConflict) {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erLockDeadlock, erLockWaitTimeout, erCheckRead:
			return true
		}
	}
	return IsConnectionLost(err)
}

// IsConnectionLost reports whether err says that the database connection it
// came from broke or was closed by the server: database/sql's
// driver.ErrBadConn, the MySQL driver's ErrInvalidConn, or a server error
// saying the connection was killed or the server is shutting down. The
// transaction running on it is lost; if the error came from COMMIT, whether
// it committed is unknown.
//
// Only what the driver and the server report counts. io.EOF,
// io.ErrUnexpectedEOF, syscall errors and net.Error are not looked for: the
// MySQL driver never returns them for a broken connection of an established
// session (it reports ErrInvalidConn), while application code wrapped around
// a transaction returns them for its own reasons (an HTTP body cut short, a
// parser reaching the end of its input), and taking those for a lost
// database connection would run committed-looking work again. A failure to
// dial a new connection is also not a lost connection: no transaction ran on
// it.
func IsConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erServerShutdown, erConnKilled, erClientInteract:
			return true
		}
	}
	return false
}
