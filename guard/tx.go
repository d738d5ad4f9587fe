package guard

import (
	"sync/atomic"

	"github.com/jmoiron/sqlx"
)

// Tx is the transaction fn runs in. It is a *sqlx.Tx whose first statement
// claimed the key's fence row with the lock's token, so every statement fn
// runs on it is ordered after the previous holders' commits and before the
// next holders'. Commit and Rollback belong to Do.
type Tx struct {
	*sqlx.Tx

	key     string
	token   uint64
	owner   string
	opID    string
	attempt int

	savepoints atomic.Int64 // names of nested savepoints
	// broken records a retryable error a nested Do returned: the server has
	// rolled the whole transaction back, so committing what follows would
	// write outside the fence. The attempt is retried even if fn returns nil.
	broken atomic.Pointer[error]
}

// Key returns the key Do locked and fenced.
func (t *Tx) Key() string { return t.key }

// Token returns the fencing token the transaction claimed the key with. It
// grows with every new holder of the key and stays the same across the
// attempts of one Do and in nested calls that join it.
func (t *Tx) Token() uint64 { return t.token }

// Owner returns the lock owner identity recorded in the fence row.
func (t *Tx) Owner() string { return t.owner }

// OpID returns the operation id written into the fence row by this attempt's
// claim; Do reads it back to settle a COMMIT whose reply was lost. It is
// unique per attempt.
func (t *Tx) OpID() string { return t.opID }

// Attempt returns which attempt of the transaction this is, from 1. fn runs
// again with a higher attempt after a retryable failure.
func (t *Tx) Attempt() int { return t.attempt }

// Commit refuses with [ErrTxManaged]: Do commits when fn returns nil.
func (t *Tx) Commit() error { return ErrTxManaged }

// Rollback refuses with [ErrTxManaged]: Do rolls back when fn returns an
// error.
func (t *Tx) Rollback() error { return ErrTxManaged }

func (t *Tx) markBroken(err error) { t.broken.CompareAndSwap(nil, &err) }

func (t *Tx) brokenErr() error {
	if p := t.broken.Load(); p != nil {
		return *p
	}
	return nil
}
