package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/devserver"
)

// Redis outages -redis-outage injects into the guard mode.
const (
	outageKill  = "kill"  // SIGKILL, then a restart on the same port, empty
	outagePause = "pause" // SIGSTOP, then SIGCONT: a server that stops answering
)

// Phases of a run with an outage, for counting the orders served in each.
const (
	phaseBefore int32 = iota
	phaseDuring
	phaseAfter
)

// restartTimeout bounds bringing the killed redis-server back.
const restartTimeout = 10 * time.Second

// redisOutage takes the guard mode's Redis away while it runs and brings it
// back: a redis-server of the run's own, never the configured one, which
// other programs may share.
type redisOutage struct {
	kind   string
	after  int64         // accepted orders before the outage starts
	length time.Duration // how long Redis stays away, at most
	until  int64         // accepted orders after which Redis comes back early
	srv    *devserver.Process
	log    io.Writer // progress

	reached chan struct{} // closed when the after-th order is accepted
	enough  chan struct{} // closed when the until-th order is accepted
	phase   atomic.Int32

	// Orders served, by how their Do held the key; Redis-mode ones also by
	// phase.
	redis    [3]atomic.Int64
	database atomic.Int64

	mu       sync.Mutex
	injected string
}

// startOutageRedis starts the redis-server that the outage takes away.
func startOutageRedis(ctx context.Context) (*devserver.Process, error) {
	p, err := devserver.StartRedis(ctx, devserver.RedisOptions{})
	if err != nil {
		return nil, fmt.Errorf("-redis-outage needs a redis-server of its own to take away: %w", err)
	}
	return p, nil
}

// newRedisOutage returns an outage of srv that starts once after orders
// were accepted and lasts length, or until half of the orders left then
// (of total) were accepted too, so that some stock is left to be sold
// once Redis is back.
func newRedisOutage(kind string, after, total int64, length time.Duration, srv *devserver.Process, log io.Writer) *redisOutage {
	return &redisOutage{kind: kind, after: after, until: after + max(1, (total-after)/4), length: length,
		srv: srv, log: log, reached: make(chan struct{}), enough: make(chan struct{})}
}

// accepted is told the number of orders accepted so far, once per order.
func (o *redisOutage) accepted(n int64) {
	switch {
	case o == nil:
	case n == o.after:
		close(o.reached)
	case n == o.until:
		close(o.enough)
	}
}

// served records an order that Do committed.
func (o *redisOutage) served(r guard.Result) {
	if r.Outcome != guard.OutcomeCommitted {
		return
	}
	if r.Mode == guard.ModeDatabase {
		o.database.Add(1)
		return
	}
	o.redis[o.phase.Load()].Add(1)
}

// run injects the outage once o.after orders were accepted, and ends it
// after o.length, once o.until orders were accepted, or as soon as the mode
// is over (done closed). It returns with Redis back, unless bringing it back
// failed.
func (o *redisOutage) run(done <-chan struct{}) {
	select {
	case <-o.reached:
	case <-done:
		o.note("no Redis outage: the mode ended before %d orders were accepted", o.after)
		return
	}
	pid := o.srv.Pid()
	if o.kind == outagePause {
		if err := o.srv.Pause(); err != nil {
			o.note("no Redis outage: %v", err)
			return
		}
	} else {
		o.srv.Kill()
	}
	o.phase.Store(phaseDuring)
	start := time.Now()
	fmt.Fprintf(o.log, "inventory: %s redis-server (pid %d, %s) after %d accepted orders\n", o.verb(), pid, o.srv.Addr, o.after)

	t := time.NewTimer(o.length)
	select {
	case <-t.C:
	case <-o.enough:
	case <-done:
	}
	t.Stop()
	var err error
	if o.kind == outagePause {
		err = o.srv.Resume()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
		err = o.srv.Restart(ctx)
		cancel()
	}
	away := time.Since(start).Round(time.Millisecond)
	o.phase.Store(phaseAfter)
	if err != nil {
		o.note("Redis %s after %d accepted orders, and bringing it back after %v failed: %v", o.verb(), o.after, away, oneLine(err))
		return
	}
	back := "restarted empty"
	if o.kind == outagePause {
		back = "resumed (SIGCONT)"
	}
	fmt.Fprintf(o.log, "inventory: redis-server %s after %v\n", back, away)
	o.note("Redis (redis-server pid %d on %s, started for this mode) %s after %d accepted orders, %s %v later, %d orders in",
		pid, o.srv.Addr, o.verb(), o.after, back, away, o.ordersNow())
}

// ordersNow is how many orders were served so far.
func (o *redisOutage) ordersNow() int64 {
	return o.redis[phaseBefore].Load() + o.redis[phaseDuring].Load() + o.redis[phaseAfter].Load() + o.database.Load()
}

func (o *redisOutage) verb() string {
	if o.kind == outagePause {
		return "frozen with SIGSTOP"
	}
	return "killed with SIGKILL"
}

func (o *redisOutage) note(format string, args ...any) {
	o.mu.Lock()
	o.injected = fmt.Sprintf(format, args...)
	o.mu.Unlock()
}

// report says what was injected, for the report.
func (o *redisOutage) report() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.injected
}

// servedText says how many orders each mode served.
func (o *redisOutage) servedText() string {
	return fmt.Sprintf("redis mode %d (%d before the outage, %d during it, %d after), database fallback %d",
		o.redis[phaseBefore].Load()+o.redis[phaseDuring].Load()+o.redis[phaseAfter].Load(),
		o.redis[phaseBefore].Load(), o.redis[phaseDuring].Load(), o.redis[phaseAfter].Load(), o.database.Load())
}
