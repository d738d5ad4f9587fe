package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Fence is a fence row as stored.
type Fence struct {
	Resource  string
	Token     uint64    // highest token accepted; 0 for a row made by Ensure and never claimed
	Owner     string    // owner that presented Token
	OpID      string    // operation id of the last accepted claim ("" for Claim)
	Claims    uint64    // number of accepted claims
	UpdatedAt time.Time // time of the last accepted claim (server clock, UTC)
}

// lookupSQL formats updated_at itself so that Lookup does not depend on the
// DSN's parseTime and loc settings.
const lookupSQL = "SELECT token, owner, op_id, claims, DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f')" +
	" FROM " + Table + " WHERE resource = ?"

// Lookup reads the fence of resource without locking it. Inside a
// transaction it sees that transaction's snapshot; on a *sql.DB it sees the
// latest committed row, which is what settling an unknown COMMIT outcome
// needs (see [ClaimOp]). It returns [ErrNoFence] when the resource has never
// been claimed or ensured, and [ErrInvalidResource] or [ErrNilTx] for bad
// input.
func Lookup(ctx context.Context, q Querier, resource string) (Fence, error) {
	if isNil(q) {
		return Fence{}, ErrNilTx
	}
	if err := validResource(resource); err != nil {
		return Fence{}, err
	}
	f := Fence{Resource: resource}
	var owner, opID []byte
	var updated string
	err := q.QueryRowContext(ctx, lookupSQL, resource).Scan(&f.Token, &owner, &opID, &f.Claims, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Fence{}, fmt.Errorf("%w: %q", ErrNoFence, resource)
	}
	if err != nil {
		return Fence{}, fmt.Errorf("fence: lookup %q: %w", resource, err)
	}
	f.Owner, f.OpID = string(owner), string(opID)
	if f.UpdatedAt, err = time.Parse("2006-01-02 15:04:05.999999", updated); err != nil {
		return Fence{}, fmt.Errorf("fence: lookup %q: updated_at %q: %w", resource, updated, err)
	}
	return f, nil
}
