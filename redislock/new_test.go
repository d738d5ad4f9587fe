package redislock

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A nil client, typed or not, makes an invalid Locker rather than a panic.
func TestNewWithNilClient(t *testing.T) {
	ctx := testCtx(t)
	for name, rdb := range map[string]redis.UniversalClient{
		"untyped":              nil,
		"*redis.Client":        (*redis.Client)(nil),
		"*redis.ClusterClient": (*redis.ClusterClient)(nil),
		"*redis.Ring":          (*redis.Ring)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panic: %v", p)
				}
			}()
			l := New(rdb, nil)
			_, e1 := l.Lock(ctx, "k")
			_, e2 := l.TryLock(ctx, "k")
			e3 := l.RaiseTokenFloor(ctx, "k", 1)
			e4 := l.Close()
			for _, err := range []error{e1, e2, e3, e4} {
				if !errors.Is(err, ErrInvalidOptions) {
					t.Errorf("%v, want ErrInvalidOptions", err)
				}
			}
		})
	}
}
