package guard

import (
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// Hooks are callbacks through which users plug metrics and tracing into a
// [Guard]. Every field may be nil. They run synchronously on the goroutine
// that calls Do, except OnLost, which runs on a goroutine of Do's own while
// fn may still be running; Do returns only after every hook call of that Do
// has returned. Hooks must be quick and must not call Do.
type Hooks struct {
	// OnAcquired is called when the lock has been granted, with the lock's
	// fencing token and the time spent waiting in the queue.
	OnAcquired func(key string, token uint64, wait time.Duration)
	// OnFenced is called when the database rejected token because the key's
	// fence row holds current (≥ token; 0 if it could not be read).
	OnFenced func(key string, token, current uint64)
	// OnLost is called once when the lock is found lost before Do finished.
	OnLost func(key string, token uint64)
	// OnRetry is called before attempt+1 runs, after attempt failed with the
	// retryable err (deadlock, lock wait timeout, connection lost).
	OnRetry func(key string, attempt int, err error)
	// OnCommitted is called after a successful COMMIT (or after Do found out
	// that a COMMIT whose reply was lost did commit), with the time since the
	// lock was granted.
	OnCommitted func(key string, token uint64, elapsed time.Duration)
}

// Options configure a [Guard]. The zero value (or a nil *Options) gives the
// defaults.
type Options struct {
	// MaxAttempts bounds how many times the whole transaction runs when an
	// attempt fails with a retryable error (see fence.Retryable: deadlock,
	// lock wait timeout, connection lost before COMMIT). 1 disables retries.
	// default: 3
	MaxAttempts int

	// BackoffMin is the pause after the first failed attempt; it doubles
	// after each further failure up to BackoffMax. Each pause is jittered
	// uniformly into [d/2, d].
	// default: 10ms
	BackoffMin time.Duration

	// BackoffMax caps the pause between attempts.
	// default: 500ms (or BackoffMin, if larger)
	BackoffMax time.Duration

	// UnlockTimeout bounds the Unlock that ends every Do. It runs on a fresh
	// context, so a caller whose ctx was cancelled still releases the lock.
	// default: 5s
	UnlockTimeout time.Duration

	// SettleTimeout bounds the check Do makes on a fresh connection when the
	// connection died during COMMIT, to find out whether it committed.
	// default: 10s
	SettleTimeout time.Duration

	// TxOptions are passed to BeginTx for every attempt. ReadOnly is refused:
	// the fence claim writes.
	// default: nil (the server's default isolation level)
	TxOptions *sql.TxOptions

	// Logger receives debug records of each step and warnings for lost
	// locks, fenced tokens, retries and failed unlocks.
	// default: a logger that discards everything
	Logger *slog.Logger

	// Hooks are called at each step; see [Hooks].
	// default: no hooks
	Hooks Hooks
}

const (
	defaultMaxAttempts   = 3
	defaultBackoffMin    = 10 * time.Millisecond
	defaultBackoffMax    = 500 * time.Millisecond
	defaultUnlockTimeout = 5 * time.Second
	defaultSettleTimeout = 10 * time.Second
)

// withDefaults validates o and returns a copy with every default applied.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.MaxAttempts < 0:
		return o, fmt.Errorf("Options.MaxAttempts is %d, must be >= 0", o.MaxAttempts)
	case o.BackoffMin < 0:
		return o, fmt.Errorf("Options.BackoffMin is %v, must be >= 0", o.BackoffMin)
	case o.BackoffMax < 0:
		return o, fmt.Errorf("Options.BackoffMax is %v, must be >= 0", o.BackoffMax)
	case o.BackoffMax > 0 && o.BackoffMax < o.BackoffMin:
		return o, fmt.Errorf("Options.BackoffMax (%v) is below Options.BackoffMin (%v)", o.BackoffMax, o.BackoffMin)
	case o.UnlockTimeout < 0:
		return o, fmt.Errorf("Options.UnlockTimeout is %v, must be >= 0", o.UnlockTimeout)
	case o.SettleTimeout < 0:
		return o, fmt.Errorf("Options.SettleTimeout is %v, must be >= 0", o.SettleTimeout)
	case o.TxOptions != nil && o.TxOptions.ReadOnly:
		return o, fmt.Errorf("Options.TxOptions.ReadOnly is set, but the fence claim writes")
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	if o.BackoffMin == 0 {
		o.BackoffMin = defaultBackoffMin
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = max(defaultBackoffMax, o.BackoffMin)
	}
	if o.UnlockTimeout == 0 {
		o.UnlockTimeout = defaultUnlockTimeout
	}
	if o.SettleTimeout == 0 {
		o.SettleTimeout = defaultSettleTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
