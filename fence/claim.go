package fence

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Table is the table holding one fence row per resource, created by package
// migrations.
const Table = "redfence_fences"

const (
	// MaxResourceLen is the longest resource accepted, in bytes (the
	// primary-key column is VARBINARY(191)).
	MaxResourceLen = 191
	// MaxOwnerLen is the longest owner accepted, in bytes.
	MaxOwnerLen = 191
	// MaxOpIDLen is the longest operation id accepted, in bytes.
	MaxOpIDLen = 191
)

// Claim outcomes, read from the OK packet's last-insert-id field, which the
// claim statement sets with LAST_INSERT_ID(expr). Any other value (0 in
// particular, which is what a server that ignored LAST_INSERT_ID(expr) would
// send) fails the claim.
const (
	outcomeAccepted = ClaimAccepted
	outcomeStale    = 2
)

// ClaimAccepted is the LAST_INSERT_ID() a claim statement leaves in its
// session when it accepted the token: a statement sent in the same request
// as the claim (a compound statement around it) runs only when it reads
// this value.
const ClaimAccepted = 1

// claimQuery builds the whole claim in the common case: one statement, one
// round trip. It inserts the fence row if the resource is new, otherwise it
// locks the row and updates it only when the token is acceptable:
//
//	accept  <=>  token < presented OR (token = presented AND owner = presenter)
//
// The condition is repeated in every assignment and always reads token and
// owner as they were: MySQL and MariaDB evaluate the assignments of ON
// DUPLICATE KEY UPDATE left to right, each seeing the new values of the
// columns assigned before it. Only owner is assigned before token, and for
// an accepted claim the condition stays true with the new owner (old token
// <= presented); for a rejected one owner is unchanged. (MariaDB's
// SIMULTANEOUS_ASSIGNMENT mode, where every expression reads the old row,
// gives the same result.)
//
// A rejected claim assigns every column its current value, so it changes
// nothing: not the token, the owner, the op id, the claims counter or
// updated_at. The outcome is therefore not read from the affected-row count
// (0 or 1 for an unchanged row depending on clientFoundRows) but from
// LAST_INSERT_ID(expr), which the server returns in the OK packet: 1 on
// insert (set in VALUES) and on an accepted update, 2 on a rejected one.
// Neither VALUES() nor a row alias nor RETURNING is used, so the statement
// runs on MySQL 8 and MariaDB alike.
//
// The values are written into the text as hexadecimal literals (X'6b6579')
// and a decimal integer rather than sent as arguments: hex digits cannot
// escape the literal whatever the connection's character set or SQL mode,
// and a statement without arguments goes out as one COM_QUERY, where the
// driver's default server-side prepared statements would cost a second
// round trip (prepare, then execute).
func claimQuery(resource string, token uint64, owner, opID string) string {
	r, t, o, p := hexLiteral(resource), strconv.FormatUint(token, 10), hexLiteral(owner), hexLiteral(opID)
	return "INSERT INTO " + Table + " (resource, token, owner, op_id, claims, updated_at)" +
		" VALUES (" + r + ", " + t + ", " + o + ", " + p + ", LAST_INSERT_ID(1), UTC_TIMESTAMP(6))" +
		" ON DUPLICATE KEY UPDATE " + claimAssignments(t, o, p)
}

// claimExistingQuery is the claim without the insert: an UPDATE of the
// fence row, with the same assignments. It matches no row when the resource
// has none; LAST_INSERT_ID(expr) is then never evaluated and the OK packet
// carries 0.
func claimExistingQuery(resource string, token uint64, owner, opID string) string {
	r, t, o, p := hexLiteral(resource), strconv.FormatUint(token, 10), hexLiteral(owner), hexLiteral(opID)
	return "UPDATE " + Table + " SET " + claimAssignments(t, o, p) + " WHERE resource = " + r
}

// claimAssignments updates a fence row for a claim of token t by owner o
// with op id p (all SQL literals), setting LAST_INSERT_ID to the outcome.
func claimAssignments(t, o, p string) string {
	accept := "(token < " + t + " OR (token = " + t + " AND owner = " + o + "))"
	return "claims = IF(LAST_INSERT_ID(IF(" + accept + ", 1, 2)) = 1, claims + 1, claims)," +
		" prev_token = IF(" + accept + ", token, prev_token)," +
		" prev_op_id = IF(" + accept + ", op_id, prev_op_id)," +
		" updated_at = IF(" + accept + ", UTC_TIMESTAMP(6), updated_at)," +
		" op_id = IF(" + accept + ", " + p + ", op_id)," +
		" owner = IF(" + accept + ", " + o + ", owner)," +
		" token = IF(" + accept + ", " + t + ", token)"
}

// hexLiteral renders s as a MySQL hexadecimal (binary string) literal.
func hexLiteral(s string) string {
	return "X'" + hex.EncodeToString([]byte(s)) + "'"
}

// staleQuery reads the figures for a StaleError. The claim statement
// already holds the row's exclusive lock, so this never waits, and FOR UPDATE
// makes it read the latest version whatever the isolation level.
func staleQuery(resource string) string {
	return "SELECT token, owner FROM " + Table + " WHERE resource = " + hexLiteral(resource) + " FOR UPDATE"
}

// Claim checks a fencing token against the fence of resource inside the
// caller's transaction, and records it when it is acceptable.
//
// A token is accepted when it is greater than the one stored, or equal to it
// and presented by the same owner (a holder may write several times under one
// token). Anything else returns a *[StaleError] (errors.Is(err, [ErrStale]))
// with the stored token, and the fence row is left exactly as it was. The
// first claim of a resource creates its fence row (see [Ensure] for making
// that step deadlock-free when creating transactions may roll back).
//
// In both cases the fence row stays locked until tx commits or rolls back, so
// claims on one resource are serialised by the database: a newer holder's
// Claim waits for an older holder's transaction to end, then proceeds; an
// older token that arrives after a newer one has been accepted is rejected.
//
// Claim must be the first statement of the transaction. Under REPEATABLE
// READ, InnoDB takes the transaction's snapshot at its first consistent read;
// when that read comes after Claim, which could only return once every
// earlier holder's transaction had ended, the snapshot includes their
// commits. A read made before Claim could see data older than the previous
// holder's commit and the transaction would then write from stale data, with
// a valid token. After a rejection the transaction must be rolled back.
//
// Claim costs one round trip when the token is accepted, whatever the DSN
// (it sends no arguments, so no prepared statement), and one more to read the
// figures when it is stale. It sets the session's LAST_INSERT_ID() to 1 or 2:
// take the id of your own inserts from their sql.Result, not from a later
// SELECT LAST_INSERT_ID().
//
// Errors: [ErrNilTx], [ErrNotTx], [ErrInvalidResource], [ErrInvalidToken],
// [ErrInvalidOwner] for bad input (nothing is sent); *[StaleError]; server and
// connection errors wrapped, which [Retryable] classifies. ctx governs the
// statements, including the wait for an older holder's transaction.
func Claim(ctx context.Context, tx Querier, resource string, token uint64, owner string) error {
	return ClaimOp(ctx, tx, resource, token, owner, "")
}

// ClaimOp is [Claim] that also records opID, an identifier of the
// transaction's operation, in the fence row when the claim is accepted. When
// the connection is lost during COMMIT the outcome is unknown;
// [Lookup] on another connection then settles it: the fence shows this opID
// (and token) if and only if the transaction committed, provided no later
// claim on the resource has been accepted since.
//
// opID may be empty and is at most [MaxOpIDLen] bytes ([ErrInvalidOpID]).
func ClaimOp(ctx context.Context, tx Querier, resource string, token uint64, owner, opID string) error {
	return claim(ctx, tx, resource, token, owner, opID, false)
}

// ClaimExisting is [ClaimOp] for a resource whose fence row is expected to
// exist: it never creates the row. When resource has no fence row it returns
// [ErrNoFence] and changes nothing, and the transaction, which may now hold a
// gap lock where the row would be, must be rolled back; [Ensure] the row,
// then claim in a new transaction. A claim never creates the fence row
// inside a transaction that could roll back, and a resource whose row
// exists costs nothing more: no read before the transaction, one round trip
// for the claim.
//
// Everything else is as for ClaimOp: the same acceptance rule, errors,
// locking and outcome reporting. It must be the first statement of tx.
func ClaimExisting(ctx context.Context, tx Querier, resource string, token uint64, owner, opID string) error {
	return claim(ctx, tx, resource, token, owner, opID, true)
}

// claim is ClaimOp, or with existing ClaimExisting.
func claim(ctx context.Context, tx Querier, resource string, token uint64, owner, opID string, existing bool) error {
	if err := validate(tx, resource, token, owner, opID); err != nil {
		return err
	}
	q := claimQuery(resource, token, owner, opID)
	if existing {
		q = claimExistingQuery(resource, token, owner, opID)
	}
	res, err := tx.ExecContext(ctx, q)
	if err != nil {
		return fmt.Errorf("fence: claim %q: %w", resource, err)
	}
	outcome, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("fence: claim %q: %w", resource, err)
	}
	switch {
	case outcome == outcomeAccepted:
		return nil
	case outcome == outcomeStale:
		return staleError(ctx, tx, resource, token, owner)
	case outcome == 0 && existing:
		// No row matched, so the assignments never ran. (A server that
		// ignored LAST_INSERT_ID(expr) would also send 0: the claim is
		// refused all the same, never accepted.)
		return fmt.Errorf("%w: claim %q", ErrNoFence, resource)
	default:
		return fmt.Errorf("%w: claim %q answered %d", ErrUnexpected, resource, outcome)
	}
}

func staleError(ctx context.Context, tx Querier, resource string, token uint64, owner string) error {
	e := &StaleError{Resource: resource, Token: token, Owner: owner}
	var current []byte
	if err := tx.QueryRowContext(ctx, staleQuery(resource)).Scan(&e.Current, &current); err != nil {
		// The claim was rejected all the same; say so even without figures.
		return fmt.Errorf("%w: %q (reading the current token: %w)", ErrStale, resource, err)
	}
	e.CurrentOwner = string(current)
	return e
}

func validate(tx Querier, resource string, token uint64, owner, opID string) error {
	if isNil(tx) {
		return ErrNilTx
	}
	if isPool(tx) {
		return ErrNotTx
	}
	if err := validResource(resource); err != nil {
		return err
	}
	if token == 0 {
		return ErrInvalidToken
	}
	if owner == "" || len(owner) > MaxOwnerLen {
		return fmt.Errorf("%w: %d bytes (1 to %d allowed)", ErrInvalidOwner, len(owner), MaxOwnerLen)
	}
	if len(opID) > MaxOpIDLen {
		return fmt.Errorf("%w: %d bytes (at most %d allowed)", ErrInvalidOpID, len(opID), MaxOpIDLen)
	}
	return nil
}

func validResource(resource string) error {
	switch {
	case resource == "":
		return fmt.Errorf("%w: empty", ErrInvalidResource)
	case len(resource) > MaxResourceLen:
		return fmt.Errorf("%w: %d bytes (at most %d allowed)", ErrInvalidResource, len(resource), MaxResourceLen)
	case !utf8.ValidString(resource):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidResource)
	}
	return nil
}
