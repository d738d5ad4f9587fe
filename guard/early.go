package guard

// early.go owns the transaction a call begins while its lock request is in
// flight: when no other call of the key is under way in this process, the
// BEGIN (and the wait for a connection) overlaps the lock's round trip, and
// the first attempt claims in it at once. If Redis queues the call instead
// of granting the lock, the transaction is given back at once, so that
// waiting for the lock still holds no connection. It decides nothing about
// the attempt that runs in it.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
)

// An early transaction waits for the lock's grant at most twice as long as
// the last grant given at once took (Guard.grantTime), within these bounds:
// a Redis that answers late (or not at all) must not keep a connection of
// the pool from the callers that need one.
const (
	earlyHoldMin = 20 * time.Millisecond
	earlyHoldMax = 250 * time.Millisecond
)

// earlyHold returns how long an early transaction waits for the grant.
func (g *Guard) earlyHold() time.Duration {
	return min(max(2*time.Duration(g.grantTime.Load()), earlyHoldMin), earlyHoldMax)
}

// early is a transaction begun for key ahead of the lock's grant.
type early struct {
	g   *Guard
	ctx context.Context
	key string

	done   chan struct{} // closed when the BEGIN has returned
	stx    *sqlx.Tx
	lg     *leg
	connID uint64
	err    error
	timer  *time.Timer // gives the transaction back after Guard.earlyHold

	mu     sync.Mutex
	used   bool // taken by the first attempt, or given back
	queued bool // Redis queued the call (see queuedBack)
}

// beginEarly begins a transaction for key on a goroutine, unless another
// call of key is under way in this process (its transaction would be
// relayed to this call, or its claim would keep this one waiting anyway,
// and the pool's last connection may be the one it needs, see spare.go),
// a call of key was queued lately (a key contended across processes would
// pay a BEGIN and a ROLLBACK per call for nothing), or the Guard is in
// database mode, where no lock request goes out.
func (g *Guard) beginEarly(ctx context.Context, key string) *early {
	if g.calls.others(key) || g.queued.lately(key) || (g.fb != nil && g.fb.open()) {
		return nil
	}
	e := &early{g: g, ctx: ctx, key: key, done: make(chan struct{})}
	e.mu.Lock() // the timer may fire before beginEarly returns
	e.timer = time.AfterFunc(g.earlyHold(), e.giveBack)
	e.mu.Unlock()
	go func() {
		defer close(e.done)
		e.stx, e.lg, e.connID, e.err = g.begin(ctx, key)
	}()
	return e
}

// queuedKeys remembers, per slot of a small table that keys hash into,
// when a call was last queued by Redis: a key found contended begins no
// early transaction for queuedFor. Keys that share a slot share the
// memory, which costs them an early BEGIN now and then, never safety.
type queuedKeys [256]atomic.Int64

// queuedFor is how long a key found contended begins no early
// transaction.
const queuedFor = time.Second

// queuedSlot hashes key to its slot.
func queuedSlot(key string) int { return int(keyHash(key) % uint64(len(queuedKeys{}))) }

// keyHash is the FNV-1a hash of key, for the tables of keys a Guard keeps
// (queuedKeys, seenRows).
func keyHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	return h
}

func (q *queuedKeys) mark(key string) { q[queuedSlot(key)].Store(time.Now().UnixNano()) }

func (q *queuedKeys) lately(key string) bool {
	at := q[queuedSlot(key)].Load()
	return at != 0 && time.Since(time.Unix(0, at)) < queuedFor
}

// keyCalls counts the calls of each key under way in this process (a
// batch counts as one).
type keyCalls struct {
	mu   sync.Mutex
	keys map[string]int
}

func (k *keyCalls) enter(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = make(map[string]int)
	}
	k.keys[key]++
}

func (k *keyCalls) leave(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys[key]--; k.keys[key] <= 0 {
		delete(k.keys, key)
	}
}

// others reports whether a call of key other than the caller's is under
// way.
func (k *keyCalls) others(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[key] > 1
}

// granted records how long the grant took, when it came at once (the call
// was not queued): the time an early transaction should wait for it.
func (e *early) granted(wait time.Duration) {
	if e == nil {
		return
	}
	e.mu.Lock()
	queued := e.queued
	e.mu.Unlock()
	if !queued {
		e.g.grantTime.Store(int64(wait))
	}
}

// queuedBack gives the transaction back because Redis queued the call
// (redislock.WithQueued).
func (e *early) queuedBack() {
	e.mu.Lock()
	e.queued = true
	e.mu.Unlock()
	e.g.queued.mark(e.key)
	e.giveBack()
}

// take returns the early transaction for the first attempt, as begin
// would, once its BEGIN has returned; ok is false when there is none (e is
// nil, or it was given back).
func (e *early) take() (stx *sqlx.Tx, lg *leg, connID uint64, err error, ok bool) {
	if !e.use() {
		return nil, nil, 0, nil, false
	}
	e.timer.Stop()
	<-e.done
	return e.stx, e.lg, e.connID, e.err, true
}

// use reports whether the caller is the first to take or give back e.
func (e *early) use() bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	first := !e.used
	e.used = true
	return first
}

// giveBack ends the early transaction unless an attempt took it: on a
// goroutine, once its BEGIN has returned, it is rolled back and its
// connection goes back to the pool. It may be called more than once.
func (e *early) giveBack() {
	if !e.use() {
		return
	}
	go func() {
		<-e.done
		if e.err != nil {
			return
		}
		if e.connID != 0 { // a leg chained by the key's previous call: restore its session
			e.g.rollback(e.ctx, e.stx, e.lg.mark)
		} else {
			_ = e.stx.Rollback()
		}
		e.g.open.leave(e.key)
		if e.lg != nil {
			e.lg.end()
		}
	}()
}
