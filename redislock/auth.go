package redislock

import (
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// AuthError is the error, wrapped, of a request that Redis refused because the
// client did not authenticate (NOAUTH, or "unauthenticated" when the server
// requires a password the client was not given) or authenticated with a wrong
// user name or password (WRONGPASS). It matches [ErrAuth]; Unwrap gives the
// server's error.
type AuthError struct {
	Addr string // the address (or addresses) the client was configured with
	Err  error  // the error the client returned
}

// Error names the server and what to do.
func (e *AuthError) Error() string {
	return fmt.Sprintf("Redis at %s refused the request: authentication required (set the password in the client options): %v",
		e.Addr, e.Err)
}

// Unwrap returns the client's error.
func (e *AuthError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrAuth].
func (e *AuthError) Is(target error) bool { return target == ErrAuth }

// named returns err, or an [AuthError] wrapping it when Redis refused the
// request for want of authentication.
func named(rdb redis.UniversalClient, err error) error {
	if err == nil || !redis.IsAuthError(err) {
		return err
	}
	return &AuthError{Addr: addrOf(rdb), Err: err}
}

// addrOf returns the address rdb was configured with, as a user would
// recognise it in their configuration.
func addrOf(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		if addr := c.Options().Addr; addr != "FailoverClient" {
			return addr
		}
		return "the primary found through Sentinel"
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		var addrs []string
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		return strings.Join(addrs, ",")
	}
	return fmt.Sprintf("the address of the %T", rdb)
}
