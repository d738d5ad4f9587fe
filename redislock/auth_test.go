package redislock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// A Redis that wants a password the client was not given, or refuses the one
// given, makes every call fail with an error that names the server and what
// to do, while errors.Is and errors.As still find the client's error.
func TestAuthRefusalIsNamed(t *testing.T) {
	const password = "s3cret-pw"
	srv := testenv.RedisServer(t, "--requirepass", password)
	for _, c := range []struct {
		name, password, cause string
	}{
		{"no password", "", "NOAUTH"}, // or the server's "unauthenticated" protocol error
		{"wrong password", "not-" + password, "WRONGPASS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: c.password})
			t.Cleanup(func() { _ = rdb.Close() })
			l := newTestLocker(t, rdb, nil)
			ctx := testCtx(t)
			_, lockErr := l.Lock(ctx, "auth")
			_, tryErr := l.TryLock(ctx, "auth")
			_, inspectErr := Inspect(ctx, rdb, "", "auth")
			for name, err := range map[string]error{
				"Lock": lockErr, "TryLock": tryErr, "RaiseTokenFloor": l.RaiseTokenFloor(ctx, "auth", 1),
				"Ping": l.Ping(ctx), "Inspect": inspectErr,
			} {
				checkAuthErr(t, name, err, srv.Addr, password)
			}
			for name, err := range map[string]error{"Lock": lockErr, "TryLock": tryErr} {
				if !errors.Is(err, ErrNotAcquired) {
					t.Errorf("%s: %v, want ErrNotAcquired too", name, err)
				}
			}
			if c.password != "" && !strings.Contains(lockErr.Error(), c.cause) {
				t.Errorf("Lock: %q does not carry the server's %s", lockErr, c.cause)
			}
		})
	}
	t.Run("right password", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: password})
		t.Cleanup(func() { _ = rdb.Close() })
		l := newTestLocker(t, rdb, nil)
		mustUnlock(t, mustLock(t, l, "auth"))
	})
}

func checkAuthErr(t *testing.T, name string, err error, addr, password string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", name)
		return
	}
	want := "Redis at " + addr + " refused the request: authentication required (set the password in the client options)"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %q does not say %q", name, err, want)
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("%s: %q shows the password", name, err)
	}
	var ae *AuthError
	if !errors.Is(err, ErrAuth) || !errors.As(err, &ae) || ae.Addr != addr {
		t.Errorf("%s: %v, want an *AuthError for %s matching ErrAuth", name, err, addr)
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) || !redis.IsAuthError(err) {
		t.Errorf("%s: %v does not wrap the client's error", name, err)
	}
}

// Only refusals for want of authentication are named so.
func TestNamedLeavesOtherErrors(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	other := errors.New("ERR unknown command")
	for _, err := range []error{nil, other, context.Canceled} {
		if got := named(rdb, err); got != err {
			t.Errorf("named(%v) = %v, want it unchanged", err, got)
		}
	}
}
