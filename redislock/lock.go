package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

type lockState int

const (
	stateHeld lockState = iota
	stateReleased
	stateLost
	stateClosed
)

// Lock is one acquisition of a lock. Its methods are safe for concurrent use.
type Lock struct {
	l     *Locker
	key   string
	k     lockKeys
	id    string
	owner string
	token uint64
	lease *leaseSpec
	done  chan struct{}

	mu       sync.Mutex
	state    lockState
	err      error
	unlocked bool // an Unlock call succeeded

	// Guarded by the renewer's mutex.
	deadline time.Time // lease end as known here (lower bound of Redis's)
	renewAt  time.Time
	lastErr  error
}

// Key returns the name the lock was acquired with.
func (lk *Lock) Key() string { return lk.key }

// Token returns the fencing token: greater than the token of every earlier
// holder of the key, and the same for reentrant acquisitions by one owner.
// Pass it to the resource the lock protects so that it can reject the writes
// of holders that have lost the lock without noticing.
func (lk *Lock) Token() uint64 { return lk.token }

// Owner returns the owner identity of the acquisition: the one given with
// WithOwner, or a unique generated one.
func (lk *Lock) Owner() string { return lk.owner }

// Done returns a channel closed when the lock is released by Unlock or Close,
// or lost (Err then reports ErrLost).
func (lk *Lock) Done() <-chan struct{} { return lk.done }

// Err returns nil while the lock is held; after Done is closed: ErrNotHeld
// after Unlock, an error wrapping ErrLost after a loss, and an error wrapping
// both ErrLost and ErrClosed after the Locker closed.
func (lk *Lock) Err() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.err
}

// end moves a held lock to its final state and closes Done; it reports
// whether it did (false when the lock had already ended).
func (lk *Lock) end(s lockState, err error) bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.state != stateHeld {
		return false
	}
	lk.state, lk.err = s, err
	close(lk.done)
	return true
}

// Unlock releases this acquisition; when it was the owner's last one, the lock
// passes directly to the first waiter. Renewal stops before the request is
// sent. It returns ErrNotHeld when the lock had already been lost. Unlock may
// be retried after an error: a retry of a release that did apply returns nil
// when it comes within Options.LeaseTTL (or WithLease) of the release and
// fewer than 128 other acquisitions of the key were released in between
// (Redis keeps the last released ids of each key for that, see
// KeyNames.Released); later it may return ErrNotHeld.
// When ctx ends before Redis answers, Unlock returns an error wrapping
// ctx.Err() at once and the request finishes in the background (Close waits
// for it). After the Locker closed it returns ErrClosed.
func (lk *Lock) Unlock(ctx context.Context) error {
	lk.mu.Lock()
	unlocked, state := lk.unlocked, lk.state
	lk.mu.Unlock()
	if unlocked {
		return nil
	}
	if state == stateClosed {
		return ErrClosed
	}
	l := lk.l
	l.renew.remove(lk)
	lk.end(stateReleased, ErrNotHeld)
	var n int64
	// A hand-off to a waiter of this Locker is not published: the reply
	// names the waiter, and req tells it, even when the caller has stopped
	// waiting. When that reply is lost (an error, or a retry, by the client
	// or the caller, answered "released before"), this Locker's waiters on
	// the key look for themselves.
	req := func() error {
		res, err := scriptUnlock.Run(ctx, l.rdb, lk.k.all(), lk.id, l.args.tokenTTL, l.args.pubcmd,
			lk.lease.ttlArg, l.idBase).Result()
		switch v := res.(type) {
		case int64:
			n = min(v, 1)
		case string:
			n = 1
			l.tellWaiter(lk.k, v)
		}
		if err != nil || res == int64(2) {
			l.wakeWaiters(lk.k)
		}
		return err
	}
	var err error
	if l.enter() {
		// An abandoned release still applies or not; a retry tells which.
		_, err = l.do(ctx, req, nil)
		l.calls.Done()
	} else {
		err = req() // the Locker closed after this lock ended
	}
	if err != nil {
		return fmt.Errorf("redislock: unlock %q: %w", lk.key, err)
	}
	if n != 1 {
		return ErrNotHeld
	}
	lk.mu.Lock()
	lk.unlocked = true
	lk.mu.Unlock()
	return nil
}
