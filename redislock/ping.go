package redislock

import (
	"context"
	"fmt"
)

// Ping checks that Redis answers a PING, for health checks and for
// detecting that Redis is unavailable (guard's database fallback). It
// returns by the time ctx ends even when Redis does not answer; the request
// then finishes on a goroutine the Locker owns, and Close waits for it.
//
// Errors: the invalid-options error of a Locker made with bad options,
// [ErrClosed], ctx's error, or the Redis client's error wrapped.
func (l *Locker) Ping(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil *Locker", ErrInvalidOptions)
	}
	if l.err != nil {
		return l.err
	}
	if !l.enter() {
		return ErrClosed
	}
	defer l.calls.Done()
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := l.do(ctx, func() error { return l.rdb.Ping(ctx).Err() }, nil)
	if err != nil {
		return fmt.Errorf("redislock: ping: %w", err)
	}
	return nil
}
