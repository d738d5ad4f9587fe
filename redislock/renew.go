package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// renewer keeps the held locks of one Locker alive. One goroutine (the loop)
// owns the schedule: it declares a lock lost at its local deadline and starts
// the renewals that fall due, one script call per hash slot, each on a
// goroutine of its own. The loop never waits for Redis, so a call that hangs
// delays neither the loss of any lock nor the renewal of locks it does not
// carry. A lock is carried by one call at a time, until that call's own
// deadline: a call still unanswered then is presumed stuck (a dead connection,
// a client reconnecting) and the locks it carries that are still held go out
// again in a new call.
type renewer struct {
	l *Locker

	mu      sync.Mutex
	locks   map[*Lock]carrier
	seq     uint64 // numbers the calls
	running bool
	stopped bool
	// sleepUntil is when the loop will next look at the locks by itself.
	sleepUntil time.Time

	wake    chan struct{}
	replies chan renewReply
	quit    chan struct{}
	done    chan struct{}
	// cancels ends the calls in flight, by number, when the renewer stops.
	cancels map[uint64]context.CancelFunc
	calls   sync.WaitGroup // renewal calls in flight
}

// carrier is the renewal call that carries a lock: seq 0 for none, or the
// call's number and its deadline.
type carrier struct {
	seq   uint64
	until time.Time
}

// renewReply is the outcome of one renewal call.
type renewReply struct {
	seq   uint64
	locks []*Lock
	sent  time.Time
	res   []int64
	err   error
}

func newRenewer(l *Locker) *renewer {
	return &renewer{l: l, locks: map[*Lock]carrier{}, wake: make(chan struct{}, 1),
		replies: make(chan renewReply), quit: make(chan struct{}), done: make(chan struct{}),
		cancels: map[uint64]context.CancelFunc{}}
}

// add starts renewing lk, whose lease ends no earlier than deadline. A full
// lease is first renewed once a third of it has passed. A lock handed over by
// message still has the short hand-off lease (WaiterTimeout, or the lock's
// own lease when shorter), whose start is known only as a lower bound (the
// last "not granted" request of the waiter); it is renewed half a hand-off
// lease before that bound runs out,
// which leaves the renewal as much time to get through and spares locks held
// briefly any renewal at all.
func (r *renewer) add(lk *Lock, deadline time.Time, handoff bool) {
	margin := lk.lease.ttl * 2 / 3
	if handoff {
		margin = lk.lease.handoff / 2
	}
	r.mu.Lock()
	lk.deadline = deadline
	lk.renewAt = deadline.Add(-margin)
	r.locks[lk] = carrier{}
	if !r.running && !r.stopped {
		r.running = true
		go r.loop()
	}
	// Wake the loop only when it would sleep past this lock's first renewal
	// (which comes before its loss); a lock taken after the others usually
	// falls due after them.
	wake := lk.renewAt.Before(r.sleepUntil)
	r.mu.Unlock()
	if wake {
		r.poke()
	}
}

func (r *renewer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// remove stops renewing lk. It returns at once; a renewal already on its way
// may still extend the lease, never after the release has applied.
func (r *renewer) remove(lk *Lock) {
	r.mu.Lock()
	delete(r.locks, lk)
	r.mu.Unlock()
}

// stop ends the loop and the renewal calls, and returns the locks that were
// still held.
func (r *renewer) stop() []*Lock {
	r.mu.Lock()
	r.stopped = true
	running := r.running
	held := make([]*Lock, 0, len(r.locks))
	for lk := range r.locks {
		held = append(held, lk)
	}
	r.locks = map[*Lock]carrier{}
	for _, cancel := range r.cancels {
		cancel()
	}
	r.mu.Unlock()
	close(r.quit)
	if running {
		<-r.done
	}
	r.calls.Wait()
	return held
}

// lossGuard is how long before the lower bound of its lease end a lock is
// declared lost, so that timer latency does not let Done close after the
// lease may have ended in Redis.
func lossGuard(lk *Lock) time.Duration {
	return min(5*time.Millisecond, lk.lease.handoff/8)
}

// lossAt is when lk is declared lost unless a renewal confirms it first.
// Callers hold r.mu.
func (r *renewer) lossAt(lk *Lock) time.Time { return lk.deadline.Add(-lossGuard(lk)) }

func (r *renewer) loop() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		r.expire(now)
		r.startDue(now)
		// Look again at least every WaiterTimeout/6 even with nothing due: a
		// lock added later falls due no earlier than that (a full lease a
		// third of LeaseTTL on, a hand-off at least WaiterTimeout/2 after
		// its waiter's last request, made at most RecheckInterval ago), so
		// add need not wake the loop; waking it on every Lock would cost a
		// goroutine switch on the hot path.
		next := now.Add(r.l.opt.WaiterTimeout / 6)
		r.mu.Lock()
		for lk, c := range r.locks {
			next = minTime(next, r.lossAt(lk), maxTime(lk.renewAt, c.until))
		}
		r.sleepUntil = next
		r.mu.Unlock()
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-r.wake:
		case rep := <-r.replies:
			r.apply(rep)
		case <-r.quit:
			return
		}
	}
}

// expire declares lost every lock whose lease may end by now without a
// successful renewal, whatever the renewal calls carrying it are doing.
func (r *renewer) expire(now time.Time) {
	type expiry struct {
		lk  *Lock
		err error
	}
	var expired []expiry
	r.mu.Lock()
	for lk := range r.locks {
		if !now.Before(r.lossAt(lk)) {
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
}

// startDue starts the renewal of the locks that are due and not carried by a
// call already. Whatever falls due soon is renewed early along with them, so
// that renewals of locks taken at different moments share one call.
func (r *renewer) startDue(now time.Time) {
	var due []*Lock
	anyDue := false
	r.mu.Lock()
	for lk, c := range r.locks {
		if lk.renewAt.Before(now.Add(lk.lease.ttl/6)) && !now.Before(c.until) {
			due = append(due, lk)
			anyDue = anyDue || !lk.renewAt.After(now)
		}
	}
	r.mu.Unlock()
	if !anyDue {
		return
	}
	// One call renews locks of one slot and one lease length.
	type group struct {
		slot  int
		lease time.Duration
	}
	groups := map[group][]*Lock{}
	for _, lk := range due {
		g := group{lease: lk.lease.ttl}
		if r.l.cluster {
			g.slot = hashSlot(lk.k.lock)
		}
		groups[g] = append(groups[g], lk)
	}
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), 256)
			r.renew(g[:n:n])
			g = g[n:]
		}
	}
}

func minTime(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.Before(t) {
			t = u
		}
	}
	return t
}

func maxTime(t, u time.Time) time.Time {
	if u.After(t) {
		return u
	}
	return t
}

// renew starts one script call renewing locks, all in one hash slot and with
// the same lease. Its reply goes to the loop.
func (r *renewer) renew(locks []*Lock) {
	lease := locks[0].lease
	keys := make([]string, len(locks))
	args := make([]any, 1, len(locks)+1)
	args[0] = lease.ttlArg
	r.mu.Lock()
	r.seq++
	seq := r.seq
	// Waiting for Redis past the first lease end is useless: that lock is
	// lost by then, and the others go out again.
	earliest := time.Now().Add(lease.ttl)
	for _, lk := range locks {
		earliest = minTime(earliest, lk.deadline)
	}
	for i, lk := range locks {
		keys[i] = lk.k.lock
		args = append(args, lk.id)
		r.locks[lk] = carrier{seq: seq, until: earliest}
	}
	ctx, cancel := context.WithDeadline(context.Background(), earliest)
	r.cancels[seq] = cancel
	if r.stopped {
		cancel() // stop has cancelled the others already
	}
	r.mu.Unlock()
	r.calls.Add(1)
	go func() {
		defer r.calls.Done()
		defer func() {
			r.mu.Lock()
			delete(r.cancels, seq)
			r.mu.Unlock()
			cancel()
		}()
		rep := renewReply{seq: seq, locks: locks, sent: time.Now()}
		rep.res, rep.err = scriptRenew.Run(ctx, r.l.rdb, keys, args...).Int64Slice()
		rep.err = named(r.l.rdb, rep.err)
		select {
		case r.replies <- rep:
		case <-r.quit:
		}
	}()
}

// apply records the outcome of a renewal call.
func (r *renewer) apply(rep renewReply) {
	res, err := rep.res, rep.err
	if err == nil && len(res) != len(rep.locks) {
		err = fmt.Errorf("redislock: renew returned %d results for %d locks", len(res), len(rep.locks))
	}
	var lost []*Lock
	r.mu.Lock()
	for i, lk := range rep.locks {
		c, ok := r.locks[lk]
		if !ok {
			continue // unlocked or declared lost meanwhile
		}
		current := c.seq == rep.seq // not superseded by a later call
		if current {
			r.locks[lk] = carrier{}
		}
		switch {
		case err != nil:
			lk.lastErr = err
			if current {
				lk.renewAt = time.Now().Add(max(lk.lease.ttl/30, time.Millisecond))
			}
		case res[i] == 1:
			if end := rep.sent.Add(lk.lease.ttl); end.After(lk.deadline) {
				lk.deadline, lk.renewAt = end, rep.sent.Add(lk.lease.ttl/3)
			}
			lk.lastErr = nil
		default:
			lost = append(lost, lk)
			delete(r.locks, lk)
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.l.opt.Logger.Warn("redislock: renewal failed", "locks", len(rep.locks), "err", err)
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
