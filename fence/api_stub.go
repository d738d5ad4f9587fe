package fence

// This file fixes the public surface so that dependent packages compile while
// the implementation is written. The implementation replaces it entirely.

import (
	"context"
	"database/sql"
	"errors"
)

var (
	ErrStale           = errors.New("fence: stale token")
	ErrConflict        = errors.New("fence: version conflict")
	ErrInvalidResource = errors.New("fence: invalid resource")
	ErrInvalidToken    = errors.New("fence: invalid token")
	ErrNilTx           = errors.New("fence: nil transaction")
	ErrNoFence         = errors.New("fence: no fence row")
)

const Table = "redfence_fences"

type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type StaleError struct {
	Resource       string
	Token, Current uint64
}

func (e *StaleError) Error() string        { panic("unimplemented") }
func (e *StaleError) Is(target error) bool { return target == ErrStale }

type Fence struct {
	Resource string
	Token    uint64
	Owner    string
	OpID     string
}

func Claim(ctx context.Context, tx Querier, resource string, token uint64, owner string) error {
	panic("unimplemented")
}
func ClaimOp(ctx context.Context, tx Querier, resource string, token uint64, owner, opID string) error {
	panic("unimplemented")
}
func Lookup(ctx context.Context, q Querier, resource string) (Fence, error) { panic("unimplemented") }
func Retryable(err error) bool                                              { panic("unimplemented") }
func IsConnectionLost(err error) bool                                       { panic("unimplemented") }
