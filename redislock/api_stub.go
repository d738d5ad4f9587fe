package redislock

// This file fixes the public surface so that dependent packages compile while
// the implementation is written. The implementation replaces it entirely.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxKeyLen is the longest key accepted, in bytes.
const MaxKeyLen = 191

var (
	ErrNotAcquired    = errors.New("redislock: not acquired")
	ErrNotHeld        = errors.New("redislock: not held")
	ErrLost           = errors.New("redislock: lock lost")
	ErrClosed         = errors.New("redislock: locker closed")
	ErrInvalidKey     = errors.New("redislock: invalid key")
	ErrInvalidOptions = errors.New("redislock: invalid options")
)

type Options struct {
	Prefix          string
	LeaseTTL        time.Duration
	WaiterTimeout   time.Duration
	RecheckInterval time.Duration
	TokenTTL        time.Duration
	MinReplicas     int
	ReplicaTimeout  time.Duration
	Logger          *slog.Logger
}

type Locker struct{}

type Lock struct{}

type LockOption func(*lockConfig)

type lockConfig struct{ owner string }

func WithOwner(owner string) LockOption { return func(c *lockConfig) { c.owner = owner } }

func New(rdb redis.UniversalClient, opt *Options) *Locker { panic("unimplemented") }

func (l *Locker) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	panic("unimplemented")
}
func (l *Locker) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	panic("unimplemented")
}
func (l *Locker) RaiseTokenFloor(ctx context.Context, key string, floor uint64) error {
	panic("unimplemented")
}
func (l *Locker) Close() error                    { panic("unimplemented") }
func (lk *Lock) Key() string                      { panic("unimplemented") }
func (lk *Lock) Token() uint64                    { panic("unimplemented") }
func (lk *Lock) Owner() string                    { panic("unimplemented") }
func (lk *Lock) Done() <-chan struct{}            { panic("unimplemented") }
func (lk *Lock) Err() error                       { panic("unimplemented") }
func (lk *Lock) Unlock(ctx context.Context) error { panic("unimplemented") }
