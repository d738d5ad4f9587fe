package guard

// This file fixes the public surface so that dependent packages compile while
// the implementation is written. The implementation replaces it entirely.

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/redislock"
)

var (
	ErrFenced         = errors.New("guard: fenced")
	ErrNilFunc        = errors.New("guard: nil fn")
	ErrInvalidGuard   = errors.New("guard: invalid guard")
	ErrNotCommitted   = errors.New("guard: not committed")
	ErrOutcomeUnknown = errors.New("guard: commit outcome unknown")
)

type Hooks struct {
	OnAcquired  func(key string, token uint64, wait time.Duration)
	OnFenced    func(key string, token, current uint64)
	OnLost      func(key string, token uint64)
	OnRetry     func(key string, attempt int, err error)
	OnCommitted func(key string, token uint64, elapsed time.Duration)
}

type Options struct {
	MaxAttempts   int
	BackoffMin    time.Duration
	BackoffMax    time.Duration
	UnlockTimeout time.Duration
	TxOptions     *sql.TxOptions
	Logger        *slog.Logger
	Hooks         Hooks
}

type Guard struct{}

type Tx struct {
	*sqlx.Tx
}

func (t *Tx) Token() uint64 { panic("unimplemented") }
func (t *Tx) Key() string   { panic("unimplemented") }

func New(locker *redislock.Locker, db *sqlx.DB, opt *Options) *Guard { panic("unimplemented") }

func (g *Guard) Do(ctx context.Context, key string, fn func(ctx context.Context, tx *Tx) error) error {
	panic("unimplemented")
}
