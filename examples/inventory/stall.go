package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redfence/redfence/redislock"
	"github.com/redis/go-redis/v9"
)

// freezer simulates a stop-the-world pause of one application instance (a
// long GC pause, a VM migration, SIGSTOP): while it is frozen, the instance's
// Redis commands, including the lock renewals, are held back, so its leases
// run out exactly as they would for a paused process. It is a go-redis hook
// installed on the instance's client.
type freezer struct {
	mu     sync.Mutex
	until  time.Time
	thawed chan struct{} // closed and replaced when a freeze ends
}

func newFreezer() *freezer { return &freezer{thawed: make(chan struct{})} }

// freeze holds back the instance's Redis traffic and blocks the caller, the
// stalled lock holder, for d.
func (f *freezer) freeze(d time.Duration) {
	f.begin(d)
	time.Sleep(d) // the stall itself: the holder does nothing meanwhile
}

// begin holds back the instance's Redis traffic until d from now, without
// blocking the caller: a network partition rather than a pause.
func (f *freezer) begin(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if end := time.Now().Add(d); end.After(f.until) {
		f.until = end
	}
}

// frozen reports whether the instance's Redis traffic is held back now.
func (f *freezer) frozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().Before(f.until)
}

// thaw ends every freeze now.
func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until = time.Now()
	close(f.thawed)
	f.thawed = make(chan struct{})
}

// wait returns once the instance is not frozen, or ctx ends.
func (f *freezer) wait(ctx context.Context) error {
	for {
		f.mu.Lock()
		left, thawed := time.Until(f.until), f.thawed
		f.mu.Unlock()
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-thawed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

var _ redis.Hook = (*freezer)(nil)

func (f *freezer) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := f.wait(ctx); err != nil {
			return nil, err
		}
		return next(ctx, network, addr)
	}
}

func (f *freezer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := f.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (f *freezer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := f.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// Stall points: where in a purchase a holder freezes.
const (
	afterLock = "after taking the lock, before its first statement"
	betweenRW = "between reading and writing the stock"
)

// failoverWait bounds how long the holder whose grant was lost waits for the
// lock to be granted to someone else.
const failoverWait = time.Second

// stalls decides which critical sections of a run are hit by a fault, and
// records what was injected for the report. With pause 0 it injects no
// stall, with failover false no lost grant.
type stalls struct {
	pause    time.Duration
	locks    atomic.Int64 // critical sections entered so far
	reads    atomic.Int64 // stock reads made inside critical sections so far
	atLock   int64        // the critical section that stalls after taking the lock
	atReadRW int64        // the first of the two reads after which their holder stalls

	failover   bool          // lose one grant in Redis, as a failover would
	prefix     string        // of the lock's Redis keys
	partition  time.Duration // how long the Redis link stays down after the holder resumes
	atFailover int64         // the critical section whose grant is lost
	failedOver atomic.Bool   // the failover has been injected
	lostGrant  atomic.Bool   // the grant was lost; the next holder signals
	regranted  chan struct{} // closed by the next holder after the loss
	regrant    sync.Once

	mu       sync.Mutex
	injected []string
}

func newStalls(pause, lease time.Duration, failover bool, prefix string, stock int) *stalls {
	// Early enough that plenty of stock is left to be sold twice, late
	// enough that every instance is busy.
	return &stalls{pause: pause, atLock: 8, atReadRW: int64(max(16, stock/8)),
		failover: failover, prefix: prefix, partition: lease / 4, atFailover: int64(max(24, stock/2)), regranted: make(chan struct{})}
}

// lockTaken is called by a holder right after it took the lock.
func (s *stalls) lockTaken(ctx context.Context, inst *instance, key string) {
	if s == nil {
		return
	}
	if s.lostGrant.Load() {
		s.regrant.Do(func() { close(s.regranted) })
	}
	switch n := s.locks.Add(1); {
	case s.pause > 0 && n == s.atLock:
		s.stall(inst, afterLock)
	case s.failover && n >= s.atFailover && !inst.frozen.frozen() && s.failedOver.CompareAndSwap(false, true):
		// Not on an instance a stall already froze: one fault at a time
		// per instance keeps the report's story true.
		s.loseGrant(ctx, inst, key)
	}
}

// loseGrant deletes the lock's keys from Redis, as a failover to a replica
// that never received them would, while inst holds the lock. inst is then
// frozen (so its renewals cannot notice) until another holder has been
// granted the lock, and a little longer so that holder's transaction comes
// first; its Redis link stays down a little after it resumes (well within
// its lease), so it goes on to write without having heard of the loss, as a
// holder cut off from Redis would.
func (s *stalls) loseGrant(ctx context.Context, inst *instance, key string) {
	names, err := redislock.KeyNamesFor(s.prefix, key)
	var n int64
	if err == nil {
		n, err = inst.rdb.Del(ctx, names.Lock, names.Token, names.Queue, names.Waiters, names.Released).Result()
	}
	if err == nil && n == 0 {
		err = fmt.Errorf("no lock keys found for %q", key)
	}
	if err != nil {
		s.mu.Lock()
		s.injected = append(s.injected, fmt.Sprintf("failover not injected: %v", err))
		s.mu.Unlock()
		return
	}
	inst.frozen.begin(failoverWait)
	start := time.Now()
	s.lostGrant.Store(true)
	select {
	case <-s.regranted:
		time.Sleep(20 * time.Millisecond)
	case <-time.After(failoverWait):
	}
	stalled := time.Since(start)
	inst.frozen.thaw()
	inst.frozen.begin(s.partition)
	s.mu.Lock()
	s.injected = append(s.injected, fmt.Sprintf("%s's grant was lost in Redis (lock keys deleted, as by a failover); "+
		"it stalled %v until the lock went to another holder, its Redis link down %v longer",
		inst.name, stalled.Round(time.Millisecond), s.partition))
	s.mu.Unlock()
}

// stockRead is called by a holder between reading and writing the stock.
// Two holders a few reads apart stall there: when a stale holder's write
// lands between another holder's read and write, the other one's write
// undoes it, so one stale write alone does not always show.
func (s *stalls) stockRead(inst *instance) {
	if s == nil || s.pause <= 0 {
		return
	}
	if n := s.reads.Add(1); n == s.atReadRW || n == s.atReadRW+4 {
		s.stall(inst, betweenRW)
	}
}

func (s *stalls) stall(inst *instance, point string) {
	s.mu.Lock()
	s.injected = append(s.injected, fmt.Sprintf("%s froze for %v %s", inst.name, s.pause, point))
	s.mu.Unlock()
	inst.frozen.freeze(s.pause)
}

// report lists the stalls injected so far.
func (s *stalls) report() []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.injected...)
}
