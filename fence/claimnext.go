package fence

import (
	"context"
	"fmt"
	"strconv"
)

// nowMicros is the server's clock in µs since the epoch. NOW(6) is in the
// session's time zone and UNIX_TIMESTAMP converts from it, so the figure is
// right whatever that zone is.
const nowMicros = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)"

// claimNextQuery mints a token and claims with it in one statement: the new
// token is max(stored + 1, the server's clock in µs), so it is above every
// token the row has accepted, and it comes back in the OK packet's
// last-insert-id field. token is assigned first, so GREATEST reads the old
// value.
func claimNextQuery(resource, owner, opID string) string {
	r, o, p := hexLiteral(resource), hexLiteral(owner), hexLiteral(opID)
	return "INSERT INTO " + Table + " (resource, token, owner, op_id, claims, updated_at)" +
		" VALUES (" + r + ", LAST_INSERT_ID(GREATEST(1, " + nowMicros + ")), " + o + ", " + p + ", 1, UTC_TIMESTAMP(6))" +
		" ON DUPLICATE KEY UPDATE" +
		" prev_token = token, prev_op_id = op_id," +
		" token = LAST_INSERT_ID(GREATEST(token + 1, " + nowMicros + "))," +
		" owner = " + o + ", op_id = " + p + ", claims = claims + 1, updated_at = UTC_TIMESTAMP(6)"
}

// ClaimNext claims the fence of resource with a token the database mints
// itself, for callers that hold no lock token (see guard's database
// fallback): max(the stored token + 1, the database server's clock in µs).
// The claim is accepted unless the row already holds the largest token,
// 2^64-1 (the server then refuses the statement with an out-of-range
// error), and the token returned is above every token the row accepted
// before, so tokens keep growing across claims made with
// [Claim] (tokens from Redis follow the same clock rule) and with ClaimNext.
//
// Like [Claim], it must be the first statement of the transaction, and the
// fence row stays locked until the transaction ends: the row lock is what
// serialises the callers, who therefore wait in the database, each holding
// a connection. The first claim of a resource creates its row (see
// [Ensure], and [ClaimNextExisting], which never does).
//
// Errors: [ErrNilTx], [ErrNotTx], [ErrInvalidResource], [ErrInvalidOwner],
// [ErrInvalidOpID] for bad input (nothing is sent); [ErrUnexpected] for an
// answer without a token; server and connection errors wrapped.
func ClaimNext(ctx context.Context, tx Querier, resource, owner, opID string) (uint64, error) {
	return claimNext(ctx, tx, resource, owner, opID, false)
}

// claimNextExistingQuery is claimNextQuery without the insert: an UPDATE of
// the fence row. It matches no row when the resource has none, and the OK
// packet then carries 0.
func claimNextExistingQuery(resource, owner, opID string) string {
	r, o, p := hexLiteral(resource), hexLiteral(owner), hexLiteral(opID)
	return "UPDATE " + Table + " SET prev_token = token, prev_op_id = op_id," +
		" token = LAST_INSERT_ID(GREATEST(token + 1, " + nowMicros + "))," +
		" owner = " + o + ", op_id = " + p + ", claims = claims + 1, updated_at = UTC_TIMESTAMP(6)" +
		" WHERE resource = " + r
}

// ClaimNextExisting is [ClaimNext] for a resource whose fence row is
// expected to exist, as [ClaimExisting] is for [ClaimOp]: it never creates
// the row. When resource has no fence row it returns [ErrNoFence] and
// changes nothing; roll the transaction back, [Ensure] the row and claim in
// a new transaction.
func ClaimNextExisting(ctx context.Context, tx Querier, resource, owner, opID string) (uint64, error) {
	return claimNext(ctx, tx, resource, owner, opID, true)
}

// claimNext is ClaimNext, or with existing ClaimNextExisting.
func claimNext(ctx context.Context, tx Querier, resource, owner, opID string, existing bool) (uint64, error) {
	if err := validate(tx, resource, 1, owner, opID); err != nil {
		return 0, err
	}
	q := claimNextQuery(resource, owner, opID)
	if existing {
		q = claimNextExistingQuery(resource, owner, opID)
	}
	res, err := tx.ExecContext(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("fence: claim next %q: %w", resource, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("fence: claim next %q: %w", resource, err)
	}
	// The OK packet carries the last-insert-id as an unsigned 64-bit
	// integer, and the driver hands its bits over as an int64: tokens at or
	// above 2^63 come back negative and are read back unsigned, as Claim
	// and Redis allow tokens up to 2^64-1.
	tok := uint64(id)
	switch {
	case tok == 0 && existing: // no row matched: the assignments never ran
		return 0, fmt.Errorf("%w: claim next %q", ErrNoFence, resource)
	case tok <= 2: // 0: LAST_INSERT_ID(expr) ignored; never below the clock otherwise
		return 0, fmt.Errorf("%w: claim next %q answered %s", ErrUnexpected, resource, strconv.FormatUint(tok, 10))
	}
	return tok, nil
}
