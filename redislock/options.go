package redislock

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redfence/redfence/internal/warnlog"
)

// Options configure a [Locker]. The zero value of every field selects its
// default; negative durations and counts are invalid, and so are durations
// below each field's minimum (such as 5, which is 5ns, where 5*time.Second
// was meant). [Locker.Err] reports an invalid field as an [*OptionError].
type Options struct {
	// Prefix starts the name of every Redis key and channel the Locker uses.
	// It must not contain '{' or '}'.
	// default: "redfence"
	Prefix string

	// LeaseTTL is how long a lock survives its holder's silence. Held locks
	// are renewed every LeaseTTL/3; a holder that cannot renew before the
	// lease ends is told by Lock.Done. At least 30ms.
	// default: 30s
	LeaseTTL time.Duration

	// WaiterTimeout is how long a queued waiter's entry lives without a
	// heartbeat; a crashed waiter stops blocking the queue after it. It is
	// also the lease of a lock handed to a waiter until that waiter's Locker
	// renews it, so that a waiter which died just before its turn delays the
	// others by at most about WaiterTimeout. At least 2ms; capped at LeaseTTL.
	// default: 5s, or 3×RecheckInterval when that is longer; at most LeaseTTL
	WaiterTimeout time.Duration

	// RecheckInterval bounds every wait: a waiter re-checks the lock (which
	// also refreshes its heartbeat) at least this often, and the first waiter
	// re-checks as soon as the holder's lease ends. At least 1ms and at most
	// WaiterTimeout/2.
	// default: WaiterTimeout/3, at least 1ms
	RecheckInterval time.Duration

	// TokenTTL is how long the stored token of an unused lock name is kept.
	// Letting it expire is safe: new tokens are never below the server time in
	// µs. It only matters for floors raised with RaiseTokenFloor above that
	// time. At least LeaseTTL.
	// default: 720h (30 days), or 2×LeaseTTL when that is longer
	TokenTTL time.Duration

	// MinReplicas is the number of replicas that must acknowledge a grant
	// (Redis WAIT) before Lock returns; with fewer, the grant is undone and
	// Lock fails with ErrNotReplicated. It costs one more round trip per
	// acquisition (a renewal and WAIT, pipelined on one connection), and
	// narrows, without closing, the window in which a failover loses a grant:
	// the fencing token is what keeps such a loss safe.
	// default: 0 (no acknowledgement required)
	MinReplicas int

	// ReplicaTimeout bounds the WAIT for replica acknowledgements. Keep it
	// below the client's ReadTimeout, which bounds every reply.
	// default: 1s
	ReplicaTimeout time.Duration

	// Logger receives warnings about lost locks and failed background work
	// (renewal, re-checks, queue clean-up, subscriptions). The same failures
	// reach the caller through Lock.Err or OnLost.
	// default: slog.Default() for warnings and errors (looked up at each
	// record, so a later slog.SetDefault applies); records below
	// slog.LevelWarn are dropped. Set a logger to send them elsewhere, or
	// slog.New(slog.DiscardHandler) to silence them.
	Logger *slog.Logger

	// OnLost, when set, is called from the renewal goroutine when a held lock
	// is lost, with the error Lock.Err will return. It must not block.
	// default: nil
	OnLost func(key string, token uint64, err error)
}

const (
	defaultPrefix         = "redfence"
	defaultLeaseTTL       = 30 * time.Second
	defaultWaiterTimeout  = 5 * time.Second
	defaultTokenTTL       = 30 * 24 * time.Hour
	defaultReplicaTimeout = time.Second
	minLeaseTTL           = 30 * time.Millisecond
	minRecheckInterval    = time.Millisecond
	minWaiterTimeout      = 2 * minRecheckInterval
	minReplicaTimeout     = time.Millisecond
)

// OptionError is the error of a [Locker] made from an invalid field of
// [Options] (see [Locker.Err]): it names the field, the value set and the
// rule it breaks, such as a duration given in the wrong unit (5 for 5s is
// 5ns). It matches [ErrInvalidOptions].
type OptionError struct {
	Field  string // the field of Options, such as "LeaseTTL"
	Value  any    // the value it was set to
	Reason string // the rule the value breaks
}

// Error names the field, its value and the rule.
func (e *OptionError) Error() string {
	if s, ok := e.Value.(string); ok {
		return fmt.Sprintf("redislock: invalid options: %s %q: %s", e.Field, s, e.Reason)
	}
	return fmt.Sprintf("redislock: invalid options: %s %v: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidOptions].
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// withDefaults returns a copy of o with every default applied, or an error
// naming the first invalid field. Defaults that depend on other fields follow
// the values the caller set, so an error only ever names fields the caller
// set.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	bad := func(field string, value any, format string, args ...any) (Options, error) {
		return Options{}, &OptionError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
	}
	if c.Prefix == "" {
		c.Prefix = defaultPrefix
	}
	if err := validatePrefix(c.Prefix); err != nil {
		return bad("Prefix", c.Prefix, "%s", strings.TrimPrefix(err.Error(), "Prefix "))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"LeaseTTL", c.LeaseTTL}, {"WaiterTimeout", c.WaiterTimeout}, {"RecheckInterval", c.RecheckInterval},
		{"TokenTTL", c.TokenTTL}, {"ReplicaTimeout", c.ReplicaTimeout}} {
		if d.v < 0 {
			return bad(d.name, d.v, "negative")
		}
	}
	if c.MinReplicas < 0 {
		return bad("MinReplicas", c.MinReplicas, "negative")
	}
	leaseSet, waiterSet, recheckSet := c.LeaseTTL != 0, c.WaiterTimeout != 0, c.RecheckInterval != 0

	if !leaseSet {
		c.LeaseTTL = defaultLeaseTTL
	}
	if c.LeaseTTL < minLeaseTTL {
		return bad("LeaseTTL", c.LeaseTTL, "shorter than %v", minLeaseTTL)
	}

	if recheckSet && c.RecheckInterval < minRecheckInterval {
		return bad("RecheckInterval", c.RecheckInterval, "shorter than %v", minRecheckInterval)
	}
	switch {
	case waiterSet && c.WaiterTimeout < minWaiterTimeout:
		return bad("WaiterTimeout", c.WaiterTimeout, "shorter than %v: a waiter re-checks twice per timeout, at most once per %v",
			minWaiterTimeout, minRecheckInterval)
	case !waiterSet:
		c.WaiterTimeout = max(defaultWaiterTimeout, 3*c.RecheckInterval)
	}
	c.WaiterTimeout = min(c.WaiterTimeout, c.LeaseTTL) // a waiter's entry never outlives a lease

	if !recheckSet {
		c.RecheckInterval = max(c.WaiterTimeout/3, minRecheckInterval)
	}
	if c.RecheckInterval > c.WaiterTimeout/2 {
		// Only a RecheckInterval the caller set can get here: the default is
		// at most WaiterTimeout/2 since WaiterTimeout is at least 2ms.
		switch {
		case waiterSet && c.WaiterTimeout == o.WaiterTimeout:
			return bad("RecheckInterval", c.RecheckInterval, "more than half of WaiterTimeout %v: live waiters would be dropped",
				c.WaiterTimeout)
		case leaseSet:
			return bad("RecheckInterval", c.RecheckInterval, "more than half of LeaseTTL %v, which caps the waiter timeout: "+
				"live waiters would be dropped", c.LeaseTTL)
		default:
			return bad("RecheckInterval", c.RecheckInterval, "more than %v, half of the longest waiter timeout (the default lease): "+
				"live waiters would be dropped", c.WaiterTimeout/2)
		}
	}

	if c.TokenTTL == 0 {
		c.TokenTTL = max(defaultTokenTTL, 2*c.LeaseTTL)
	}
	if c.TokenTTL < c.LeaseTTL {
		if leaseSet {
			return bad("TokenTTL", c.TokenTTL, "shorter than LeaseTTL %v", c.LeaseTTL)
		}
		return bad("TokenTTL", c.TokenTTL, "shorter than the lease (%v by default)", c.LeaseTTL)
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = defaultReplicaTimeout
	}
	if c.ReplicaTimeout < minReplicaTimeout {
		return bad("ReplicaTimeout", c.ReplicaTimeout, "shorter than %v", minReplicaTimeout)
	}
	if c.Logger == nil {
		c.Logger = warnlog.New()
	}
	return c, nil
}

// LockOption changes one acquisition made by Lock or TryLock.
type LockOption func(*lockConfig)

type lockConfig struct {
	owner    string
	ownerSet bool
	lease    time.Duration
	leaseSet bool
	queued   func()
}

// WithOwner makes the acquisition belong to owner. Acquisitions with the same
// owner are reentrant: while the owner holds the key, Lock and TryLock succeed
// at once with the same token, and the key stays held until every one of them
// is unlocked. Owners are compared as strings across all processes, so they
// must be unique per logical holder (a request id, a job id), never shared by
// unrelated callers. An empty owner is invalid (ErrInvalidOptions).
//
// Without WithOwner every acquisition gets a fresh unique owner and is never
// reentrant.
func WithOwner(owner string) LockOption {
	return func(c *lockConfig) { c.owner, c.ownerSet = owner, true }
}

// WithQueued makes Lock call f, once, when its first request to Redis
// finds the lock taken and queues the caller, before Lock waits for its
// turn. f is not called when the lock is granted at once, when the first
// request fails, or by TryLock. It runs on the caller's goroutine and must
// not block: it lets a caller that prepared for an immediate grant (a
// database connection taken while the request was in flight, say) give
// that back while it waits.
func WithQueued(f func()) LockOption {
	return func(c *lockConfig) { c.queued = f }
}

// WithLease gives the acquisition a lease of d instead of Options.LeaseTTL:
// the lock is granted for d, renewed every d/3 while held, and a retried
// Unlock is answered as Options.LeaseTTL describes, within d of the release.
// A lock handed to this acquisition as a waiter starts with a lease of the
// shorter of d and Options.WaiterTimeout, until renewed. d must be at least
// 30ms and at most Options.TokenTTL; otherwise Lock and TryLock return an
// error wrapping ErrInvalidOptions and send nothing to Redis.
//
// Reentrant acquisitions (see WithOwner) with different leases share one
// lock, whose lease is never shortened by a renewal: it runs to the end of
// the longest lease renewed.
func WithLease(d time.Duration) LockOption {
	return func(c *lockConfig) { c.lease, c.leaseSet = d, true }
}

// leaseSpec is the lease of one acquisition: its length, the shorter lease of
// a hand-off to it (see Options.WaiterTimeout), and both as script arguments.
type leaseSpec struct {
	ttl, handoff       time.Duration
	ttlArg, handoffArg any
}

// leaseFor returns the lease of an acquisition of lease d.
func (l *Locker) leaseFor(d time.Duration) *leaseSpec {
	h := min(l.opt.WaiterTimeout, d)
	return &leaseSpec{ttl: d, handoff: h, ttlArg: l.msArg(d), handoffArg: l.msArg(h)}
}

// lease returns the lease cfg asks for, or an error wrapping
// ErrInvalidOptions.
func (l *Locker) lease(cfg *lockConfig) (*leaseSpec, error) {
	if !cfg.leaseSet || cfg.lease == l.opt.LeaseTTL {
		return l.defLease, nil
	}
	switch d := cfg.lease; {
	case d <= 0:
		return nil, fmt.Errorf("%w: WithLease(%v): not positive", ErrInvalidOptions, d)
	case d < minLeaseTTL:
		return nil, fmt.Errorf("%w: WithLease(%v): shorter than %v", ErrInvalidOptions, d, minLeaseTTL)
	case d > l.opt.TokenTTL:
		return nil, fmt.Errorf("%w: WithLease(%v): longer than TokenTTL %v", ErrInvalidOptions, d, l.opt.TokenTTL)
	}
	return l.leaseFor(cfg.lease), nil
}
