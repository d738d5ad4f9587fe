package fence

import (
	"errors"
	"fmt"
)

var (
	// ErrStale means the token presented is older than the one the fence
	// already holds (or equal to it but presented by another owner). The
	// error returned is a *[StaleError] carrying the figures.
	ErrStale = errors.New("fence: stale token")

	// ErrConflict means an optimistic update found another version than the
	// one it expected ([UpdateVersion]). The error returned is a
	// *[ConflictError].
	ErrConflict = errors.New("fence: version conflict")

	// ErrInvalidResource means the resource is empty, longer than
	// [MaxResourceLen] bytes or not valid UTF-8.
	ErrInvalidResource = errors.New("fence: invalid resource")

	// ErrInvalidToken means the token is 0, which no lock ever hands out.
	ErrInvalidToken = errors.New("fence: invalid token")

	// ErrInvalidOwner means the owner is empty or longer than [MaxOwnerLen]
	// bytes.
	ErrInvalidOwner = errors.New("fence: invalid owner")

	// ErrInvalidOpID means the operation id is longer than [MaxOpIDLen] bytes.
	ErrInvalidOpID = errors.New("fence: invalid operation id")

	// ErrNilTx means the transaction (or connection) passed in is nil,
	// including a nil *sql.Tx stored in the interface.
	ErrNilTx = errors.New("fence: nil transaction")

	// ErrNotTx means Claim was given a connection pool (*sql.DB, *sqlx.DB):
	// each statement on a pool commits on its own, so the claim would hold
	// no lock and protect nothing.
	ErrNotTx = errors.New("fence: claim needs a transaction, not a connection pool")

	// ErrNoFence means no fence row exists for the resource ([Lookup]).
	ErrNoFence = errors.New("fence: no fence row")

	// ErrNoRow means a guarded update ([UpdateToken], [UpdateVersion])
	// found no row at all matching its WHERE clause.
	ErrNoRow = errors.New("fence: no row matches")

	// ErrUnexpected means the server answered a claim in a way that fits
	// none of its documented outcomes. The claim is treated as failed, never
	// as accepted; the transaction should be rolled back.
	ErrUnexpected = errors.New("fence: unexpected answer from the server")
)

// StaleError is returned, wrapped or not, when a fence rejects a token. It
// matches [ErrStale] with errors.Is; errors.As gives the figures.
type StaleError struct {
	Resource     string // the fenced resource, or the table for [UpdateToken]
	Token        uint64 // the token presented
	Owner        string // the owner that presented it
	Current      uint64 // the token the fence holds, which is >= Token
	CurrentOwner string // the owner that holds Current
}

// Error describes the rejection.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token for %q: presented %d by %q, fence holds %d by %q",
		e.Resource, e.Token, e.Owner, e.Current, e.CurrentOwner)
}

// Is reports whether target is [ErrStale].
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ConflictError is returned by [UpdateVersion] when the row carries another
// version than the one expected. It matches [ErrConflict] with errors.Is.
type ConflictError struct {
	Table    string // the table updated
	Expected uint64 // the version the caller read
	Current  uint64 // the version the row carries now
}

// Error describes the conflict.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("fence: version conflict in %s: expected %d, row has %d", e.Table, e.Expected, e.Current)
}

// Is reports whether target is [ErrConflict].
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }
