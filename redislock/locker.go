package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/errs"
)

// Locker acquires locks on one Redis deployment. It is safe for concurrent
// use; create one per process and share it. Its background work (renewal, the
// shared subscription) starts on first use and stops at Close.
type Locker struct {
	rdb     redis.UniversalClient
	opt     Options
	err     error // set when New got invalid options; returned by every method
	cluster bool
	pubcmd  string
	idBase  string
	seq     atomic.Uint64
	args    scriptArgs
	// defLease is the lease of acquisitions without WithLease.
	defLease *leaseSpec

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	calls   sync.WaitGroup // Lock, TryLock, Unlock and RaiseTokenFloor in flight
	// bg tracks the work callers do not wait for: queue clean-ups, requests
	// abandoned when a caller's ctx ended, subscription requests. It is only
	// added to from calls in flight, so Close can wait for it after calls.
	bg    sync.WaitGroup
	subs  map[int]*subscriber
	renew *renewer
	// subsRunning tracks the dispatch goroutines of subscribers, including
	// retired ones no longer in subs.
	subsRunning sync.WaitGroup
	// subsPruneAt is the size of subs at which idle subscribers that never
	// connected are dropped before another is added.
	subsPruneAt int
}

// New returns a Locker using rdb, a *redis.Client, *redis.ClusterClient or
// failover client. opt may be nil for all defaults. When opt is invalid or rdb
// is nil, New still returns a Locker, whose every method returns an error
// wrapping ErrInvalidOptions that names the problem; [Locker.Err] returns it
// at once, so that a program can refuse to start with it. New sends nothing
// to Redis.
func New(rdb redis.UniversalClient, opt *Options) *Locker {
	l := &Locker{rdb: rdb, closing: make(chan struct{}), subs: map[int]*subscriber{}, pubcmd: "PUBLISH"}
	l.opt, l.err = opt.withDefaults()
	if l.err == nil && isNil(rdb) {
		l.err = fmt.Errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	if _, ok := rdb.(*redis.ClusterClient); ok {
		l.cluster, l.pubcmd = true, "SPUBLISH"
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	l.idBase = hex.EncodeToString(b[:])
	l.renew = newRenewer(l)
	l.args = scriptArgs{tokenTTL: l.msArg(l.opt.TokenTTL), waiter: l.msArg(l.opt.WaiterTimeout), pubcmd: l.pubcmd}
	l.defLease = l.leaseFor(l.opt.LeaseTTL)
	return l
}

// Err returns the error every call of l would return because of how l was
// made: an [*OptionError] (matching [ErrInvalidOptions]) naming the first
// invalid field of the Options given to [New], or an error wrapping
// ErrInvalidOptions for a nil client or a nil *Locker. It returns nil for a
// usable Locker, closed or not, and contacts nobody: check it right after New.
func (l *Locker) Err() error {
	if l == nil {
		return fmt.Errorf("%w: nil *Locker", ErrInvalidOptions)
	}
	return l.err
}

// isNil tells whether rdb is nil, including a nil pointer of a client type
// (a *redis.Client that was never set), which would panic on first use.
func isNil(rdb redis.UniversalClient) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// scriptArgs are the script arguments fixed for a Locker, formatted once and
// already boxed, so that a request converts and allocates none of them.
type scriptArgs struct {
	tokenTTL, waiter, pubcmd any
}

// msArg formats d in whole milliseconds (at least 1) for a script.
func (l *Locker) msArg(d time.Duration) any { return strconv.FormatInt(l.ms(d), 10) }

// newID returns an id unique across Lockers: it names one acquisition (and
// its queue entry), and is the default owner. The scripts take the part
// before its first '.' (idBase, which has none) as the Locker's id, to
// announce a hand-off on that Locker's channel only.
func (l *Locker) newID() string {
	return l.idBase + "." + strconv.FormatUint(l.seq.Add(1), 36)
}

// enter registers a call in flight, or reports that the Locker is closed.
func (l *Locker) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.calls.Add(1)
	return true
}

func (l *Locker) keys(key string) lockKeys { return keysFor(l.opt.Prefix, key) }

// waitChannel is the channel this Locker's waiters for k are told of
// hand-offs on.
func (l *Locker) waitChannel(k lockKeys) string { return k.ch + ":" + l.idBase }

func (l *Locker) ms(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }

// Lock acquires the lock named key, waiting in FIFO order behind earlier
// callers for as long as ctx allows. The returned Lock must be released with
// Unlock.
//
// ctx bounds the wait only; the lock lives until Unlock or until it is lost
// (see Lock.Done). When ctx ends first, Lock returns at once, even while a
// request to Redis is still unanswered, with an error that satisfies both
// errors.Is(err, ErrNotAcquired) and errors.Is(err, ctx.Err()); the caller's
// place in the queue is given up in the background, after any such request
// has finished (a grant that arrived at the same moment is passed on to the
// next waiter), and Close waits for that. Other errors: ErrInvalidKey,
// ErrInvalidOptions, ErrClosed, ErrTokenOverflow and Redis errors (the last
// three joined with ErrNotAcquired; a Redis that wants a password it was not
// given, or refuses the one given, is an *AuthError matching ErrAuth); on
// those the queue is left before Lock returns, as long as ctx lasts.
func (l *Locker) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return l.lock(ctx, key, false, opts)
}

// TryLock acquires the lock named key only if it is free and nobody waits for
// it, or when its holder is the same owner (see WithOwner), which includes a
// lock free for the owner's own queued Lock to take; otherwise it returns
// ErrNotAcquired at once without queueing. ctx bounds the round trip.
func (l *Locker) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return l.lock(ctx, key, true, opts)
}

func (l *Locker) lock(ctx context.Context, key string, try bool, opts []LockOption) (*Lock, error) {
	if l.err != nil {
		return nil, l.err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var cfg lockConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.ownerSet && cfg.owner == "" {
		return nil, fmt.Errorf("%w: empty owner", ErrInvalidOptions)
	}
	lease, err := l.lease(&cfg)
	if err != nil {
		return nil, err
	}
	if !l.enter() {
		return nil, errs.Join(ErrNotAcquired, ErrClosed)
	}
	defer l.calls.Done()
	if err := ctx.Err(); err != nil {
		return nil, errs.Join(ErrNotAcquired, err)
	}
	a := &attempt{l: l, key: key, k: l.keys(key), id: l.newID(), owner: cfg.owner, lease: lease, queued: cfg.queued}
	if !cfg.ownerSet {
		a.owner = a.id
	}
	if try {
		return a.try(ctx)
	}
	return a.wait(ctx)
}

// RaiseTokenFloor makes every later token of key greater than floor: the
// stored token becomes max(stored, floor). Use it when the protected resource
// reports a token higher than Redis minted, which happens when a failover
// brought a server whose clock is behind the old one. The floor is kept for
// Options.TokenTTL. A floor of 2^64-1 leaves no token above it and is refused
// with ErrTokenOverflow, writing nothing; a floor close to it leaves only the
// tokens in between, after which Lock fails with ErrTokenOverflow until the
// token key expires.
func (l *Locker) RaiseTokenFloor(ctx context.Context, key string, floor uint64) error {
	if l.err != nil {
		return l.err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	if floor == math.MaxUint64 {
		return fmt.Errorf("%w: floor %d of %q leaves no token above it", ErrTokenOverflow, floor, key)
	}
	if !l.enter() {
		return ErrClosed
	}
	defer l.calls.Done()
	k := l.keys(key)
	_, err := l.do(ctx, func() error {
		return scriptFloor.Run(ctx, l.rdb, []string{k.token}, strconv.FormatUint(floor, 10), l.args.tokenTTL).Err()
	}, nil)
	if err != nil {
		return fmt.Errorf("redislock: raise token floor of %q: %w", key, err)
	}
	return nil
}

// Close stops the Locker. Waiting Lock calls return ErrClosed (joined with
// ErrNotAcquired); locks still held are released (their Done channels close
// and Err reports ErrLost joined with ErrClosed); later calls return
// ErrClosed. Close waits for all of that and for the background work of
// earlier calls: queue clean-ups of Lock calls that gave up (each bounded by
// WaiterTimeout) and Redis requests abandoned when a caller's ctx ended (which
// the client's own timeouts bound). The releases are bounded by WaiterTimeout;
// Close returns the first release error.
func (l *Locker) Close() error {
	if l.err != nil {
		return l.err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closing)
	l.mu.Unlock()

	l.calls.Wait()
	l.bg.Wait()
	held := l.renew.stop()
	err := l.releaseAll(held)
	l.mu.Lock()
	subs := l.subs
	l.subs = map[int]*subscriber{}
	l.mu.Unlock()
	for _, s := range subs {
		s.close()
	}
	l.subsRunning.Wait()
	return err
}

func (l *Locker) releaseAll(held []*Lock) error {
	if len(held) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opt.WaiterTimeout)
	defer cancel()
	var first error
	for _, lk := range held {
		err := scriptUnlock.Run(ctx, l.rdb, lk.k.all(), lk.id, l.args.tokenTTL, l.args.pubcmd, lk.lease.ttlArg).Err()
		if err != nil && first == nil {
			first = fmt.Errorf("redislock: release %q on close: %w", lk.key, named(l.rdb, err))
		}
		lk.end(stateClosed, fmt.Errorf("%w: %w", ErrLost, ErrClosed))
	}
	return first
}

// goOwned runs f on a goroutine that Close waits for. Only calls in flight
// (between enter and calls.Done) may use it.
func (l *Locker) goOwned(f func()) {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		f()
	}()
}

// do runs req, one Redis request made with ctx, and returns its error; when
// ctx ends first it returns ctx.Err() at once instead. A refusal for want of
// authentication comes back as an *AuthError. Clients give up on a
// request at the ctx deadline only with ContextTimeoutEnabled, otherwise at
// their own read timeout, and a reconnecting client may take longer still.
// An abandoned request finishes on a goroutine owned by the Locker, which
// then runs abandoned (if not nil): the caller no longer knows whether the
// request applied. A ctx that cannot end costs no goroutine. Only calls in
// flight may use do.
func (l *Locker) do(ctx context.Context, req func() error, abandoned func()) (gaveUp bool, err error) {
	if ctx.Done() == nil {
		return false, named(l.rdb, req())
	}
	c := &pending{done: make(chan error, 1)}
	l.goOwned(func() {
		err := req()
		if c.state.CompareAndSwap(pendingRunning, pendingFinished) {
			c.done <- err
		} else if abandoned != nil {
			abandoned()
		}
	})
	select {
	case err := <-c.done:
		return false, named(l.rdb, err)
	case <-ctx.Done():
		if c.state.CompareAndSwap(pendingRunning, pendingAbandoned) {
			return true, ctx.Err()
		}
		return false, named(l.rdb, <-c.done) // finished meanwhile: the reply is here
	}
}

const (
	pendingRunning int32 = iota
	pendingFinished
	pendingAbandoned
)

// pending is one request run by do.
type pending struct {
	state atomic.Int32
	done  chan error
}

// subscriberFor returns the subscriber for the slot of k, creating it. The
// caller must register with it once; until then it stays in service.
func (l *Locker) subscriberFor(k lockKeys) *subscriber {
	slot := l.slotOf(k)
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.subs[slot]
	if s == nil {
		if len(l.subs) >= l.subsPruneAt {
			l.pruneSubs()
		}
		s = newSubscriber(l, slot)
		l.subs[slot] = s
	}
	s.mu.Lock()
	s.pending++
	s.mu.Unlock()
	return s
}

// subscriberOf returns the subscriber serving the waiters on k, or nil.
func (l *Locker) subscriberOf(k lockKeys) *subscriber {
	slot := l.slotOf(k)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.subs[slot]
}

// slotOf is the key of k's subscriber in subs: its hash slot on a cluster,
// 0 otherwise.
func (l *Locker) slotOf(k lockKeys) int {
	if l.cluster {
		return hashSlot(k.ch)
	}
	return 0
}

// pruneSubs drops the subscribers that serve nobody and never connected
// (those of locks that were always free): the ones that connected retire by
// themselves. It runs when subs has doubled since the last time, so that its
// cost per new subscriber stays constant. The caller holds l.mu.
func (l *Locker) pruneSubs() {
	for slot, s := range l.subs {
		s.mu.Lock()
		if !s.started && s.unused() {
			s.closed = true
			delete(l.subs, slot)
		}
		s.mu.Unlock()
	}
	l.subsPruneAt = max(2*len(l.subs), 64)
}

// scripter returns the client a pipeline with WAIT must use: WAIT has no key,
// so on a cluster the pipeline must go to the node that owns the lock.
func (l *Locker) scripter(ctx context.Context, k lockKeys) (redis.Cmdable, error) {
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, k.lock)
	}
	return l.rdb, nil
}
