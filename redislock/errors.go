package redislock

import "errors"

var (
	// ErrNotAcquired is returned by TryLock when the lock is held or others
	// wait for it, and wrapped by every failed Lock: joined with ctx.Err() when
	// the context ended, with ErrClosed when the Locker closed, with the Redis
	// error on a transport failure, with ErrNotReplicated when too few replicas
	// acknowledged the grant.
	ErrNotAcquired = errors.New("redislock: not acquired")
	// ErrNotHeld is returned by Unlock when the lock was no longer held by this
	// acquisition (its lease ended), and by Err after a successful Unlock.
	ErrNotHeld = errors.New("redislock: not held")
	// ErrLost is returned by Lock.Err once renewal found the lock gone or could
	// not reach Redis before the lease ended.
	ErrLost = errors.New("redislock: lock lost")
	// ErrClosed is returned by the methods of a closed Locker.
	ErrClosed = errors.New("redislock: locker closed")
	// ErrInvalidKey is wrapped by errors for keys that are empty, longer than
	// MaxKeyLen bytes or not valid UTF-8.
	ErrInvalidKey = errors.New("redislock: invalid key")
	// ErrInvalidOptions is wrapped by every error of a Locker built from
	// invalid Options (an [*OptionError]) or a nil client, which
	// [Locker.Err] returns right after New, and by errors for invalid
	// LockOptions.
	ErrInvalidOptions = errors.New("redislock: invalid options")
	// ErrNotReplicated is joined with ErrNotAcquired when fewer than
	// Options.MinReplicas replicas acknowledged a grant within
	// Options.ReplicaTimeout. The grant has been undone.
	ErrNotReplicated = errors.New("redislock: grant not acknowledged by enough replicas")
	// ErrTokenOverflow is returned by RaiseTokenFloor for a floor that leaves
	// no token above it, and joined with ErrNotAcquired when a key's stored
	// token has reached 2^64-1, so that no larger one can be minted. Nothing
	// is written in either case; reentrant acquisitions by the current holder
	// still succeed.
	ErrTokenOverflow = errors.New("redislock: fencing token would exceed 2^64-1")
	// ErrAuth is matched by the errors of requests that Redis refused because
	// the client gave no password, or a wrong one: set it in the client's
	// options (redis.Options.Password, or Username and Password). The error
	// is an *[AuthError], which names the server and wraps the client's
	// error.
	ErrAuth = errors.New("redislock: authentication required")
)
