package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// renewer keeps the held locks of one Locker alive from a single goroutine:
// every round renews all locks that are due, one script call per hash slot.
type renewer struct {
	l *Locker

	mu      sync.Mutex
	locks   map[*Lock]struct{}
	running bool
	stopped bool
	// sleepUntil is when the loop will next look at the locks by itself.
	sleepUntil time.Time
	wake       chan struct{}
	quit       chan struct{}
	done       chan struct{}
}

func newRenewer(l *Locker) *renewer {
	return &renewer{l: l, locks: map[*Lock]struct{}{}, wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
}

// add starts renewing lk, whose lease ends no earlier than deadline. A full
// lease (LeaseTTL) is first renewed once a third of it has passed. A lock
// handed over by message still has the short hand-off lease (WaiterTimeout),
// whose start is known only as a lower bound (the last "not granted" request
// of the waiter); it is renewed WaiterTimeout/2 before that bound runs out,
// which leaves the renewal as much time to get through and spares locks held
// briefly any renewal at all.
func (r *renewer) add(lk *Lock, deadline time.Time, handoff bool) {
	margin := r.l.opt.LeaseTTL * 2 / 3
	if handoff {
		margin = r.l.opt.WaiterTimeout / 2
	}
	r.mu.Lock()
	lk.deadline = deadline
	lk.renewAt = deadline.Add(-margin)
	r.locks[lk] = struct{}{}
	if !r.running && !r.stopped {
		r.running = true
		go r.loop()
	}
	// Wake the loop only when it would sleep past this lock's first renewal;
	// a lock taken after the others usually falls due after them.
	wake := lk.renewAt.Before(r.sleepUntil)
	r.mu.Unlock()
	if wake {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// remove stops renewing lk. It returns at once; a renewal already on its way
// may still extend the lease, never after the release has applied.
func (r *renewer) remove(lk *Lock) {
	r.mu.Lock()
	delete(r.locks, lk)
	r.mu.Unlock()
}

// stop ends the goroutine and returns the locks that were still held.
func (r *renewer) stop() []*Lock {
	r.mu.Lock()
	r.stopped = true
	running := r.running
	held := make([]*Lock, 0, len(r.locks))
	for lk := range r.locks {
		held = append(held, lk)
	}
	r.locks = map[*Lock]struct{}{}
	r.mu.Unlock()
	close(r.quit)
	if running {
		<-r.done
	}
	return held
}

func (r *renewer) loop() {
	defer close(r.done)
	lease := r.l.opt.LeaseTTL
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var due []*Lock
		// Look again at least every WaiterTimeout/6 even with nothing due: a
		// lock added later falls due no earlier than that (a full lease a
		// third of LeaseTTL on, a hand-off at least WaiterTimeout/2 after
		// its waiter's last request, made at most RecheckInterval ago), so
		// add need not wake the loop; waking it on every Lock would cost a
		// goroutine switch on the hot path.
		next := now.Add(r.l.opt.WaiterTimeout / 6)
		r.mu.Lock()
		for lk := range r.locks {
			// Renew early whatever falls due soon, so renewals of locks
			// taken at different moments fall into the same batch.
			if lk.renewAt.Before(now.Add(lease / 6)) {
				due = append(due, lk)
			}
		}
		r.mu.Unlock()
		if len(due) > 0 && !r.anyDue(due, now) {
			due = nil
		}
		if len(due) > 0 {
			r.renewAll(due)
			continue
		}
		if r.expire(now) > 0 {
			continue
		}
		r.mu.Lock()
		for lk := range r.locks {
			next = minTime(next, lk.deadline, lk.renewAt)
		}
		r.sleepUntil = next
		r.mu.Unlock()
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-r.wake:
		case <-r.quit:
			return
		}
	}
}

// expire declares lost every lock whose lease has ended here without a
// successful renewal, and returns how many there were.
func (r *renewer) expire(now time.Time) int {
	type expiry struct {
		lk  *Lock
		err error
	}
	var expired []expiry
	r.mu.Lock()
	for lk := range r.locks {
		if !now.Before(lk.deadline) {
			err := fmt.Errorf("%w: lease ended without a successful renewal", ErrLost)
			if lk.lastErr != nil {
				err = fmt.Errorf("%w: lease ended without a successful renewal: %w", ErrLost, lk.lastErr)
			}
			expired = append(expired, expiry{lk, err})
			delete(r.locks, lk)
		}
	}
	r.mu.Unlock()
	for _, e := range expired {
		r.lose(e.lk, e.err)
	}
	return len(expired)
}

func (r *renewer) anyDue(locks []*Lock, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, lk := range locks {
		if !lk.renewAt.After(now) {
			return true
		}
	}
	return false
}

func minTime(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.Before(t) {
			t = u
		}
	}
	return t
}

// renewAll renews locks, one script call per hash slot (one call in all for a
// non-cluster client), in chunks that keep each script short.
func (r *renewer) renewAll(locks []*Lock) {
	groups := map[int][]*Lock{}
	for _, lk := range locks {
		slot := 0
		if r.l.cluster {
			slot = hashSlot(lk.k.lock)
		}
		groups[slot] = append(groups[slot], lk)
	}
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), 256)
			r.renewBatch(g[:n])
			g = g[n:]
		}
	}
}

func (r *renewer) renewBatch(locks []*Lock) {
	l := r.l
	lease := l.opt.LeaseTTL
	keys := make([]string, len(locks))
	args := make([]any, 1, len(locks)+1)
	args[0] = l.ms(lease)
	r.mu.Lock()
	earliest := time.Now().Add(lease / 3)
	for i, lk := range locks {
		keys[i] = lk.k.lock
		args = append(args, lk.id)
		earliest = minTime(earliest, lk.deadline)
	}
	r.mu.Unlock()
	// Never wait for Redis past the first lease end: loss must be noticed then.
	ctx, cancel := context.WithDeadline(context.Background(), earliest)
	defer cancel()
	select {
	case <-r.quit:
		cancel()
	default:
	}
	sent := time.Now()
	// The client may not give up at the context deadline (a new connection's
	// handshake, for one), so the call runs aside while the leases are watched
	// here; there is never more than one call in flight.
	type reply struct {
		res []int64
		err error
	}
	replied := make(chan reply, 1)
	go func() {
		res, err := scriptRenew.Run(ctx, l.rdb, keys, args...).Int64Slice()
		replied <- reply{res, err}
	}()
	timer := time.NewTimer(time.Until(earliest))
	defer timer.Stop()
	var rep reply
	for waiting := true; waiting; {
		select {
		case rep = <-replied:
			waiting = false
		case <-timer.C:
			r.expire(time.Now())
			timer.Reset(lease / 10)
		}
	}
	res, err := rep.res, rep.err
	if err == nil && len(res) != len(locks) {
		err = fmt.Errorf("redislock: renew returned %d results for %d locks", len(res), len(locks))
	}
	var lost []*Lock
	r.mu.Lock()
	for i, lk := range locks {
		if _, ok := r.locks[lk]; !ok {
			continue // unlocked meanwhile
		}
		switch {
		case err != nil:
			lk.lastErr = err
			lk.renewAt = time.Now().Add(max(lease/30, time.Millisecond))
		case res[i] == 1:
			lk.deadline, lk.renewAt, lk.lastErr = sent.Add(lease), sent.Add(lease/3), nil
		default:
			lost = append(lost, lk)
			delete(r.locks, lk)
		}
	}
	r.mu.Unlock()
	if err != nil {
		l.opt.Logger.Warn("redislock: renewal failed", "locks", len(locks), "err", err)
	}
	for _, lk := range lost {
		r.lose(lk, fmt.Errorf("%w: no longer held in Redis", ErrLost))
	}
}

func (r *renewer) lose(lk *Lock, err error) {
	if !lk.end(stateLost, err) {
		return
	}
	r.l.opt.Logger.Warn("redislock: lock lost", "key", lk.key, "token", lk.token, "err", err)
	if f := r.l.opt.OnLost; f != nil {
		f(lk.key, lk.token, err)
	}
}
