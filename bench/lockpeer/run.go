package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// section is one lock → critical section → unlock of a contention run.
type section struct {
	g        int
	called   time.Time // acquire called
	acquired time.Time // acquire returned
	relStart time.Time // release called
	relEnd   time.Time // release returned
	order    uint64
	seq      int64
}

// slice is one variant's share of a run at one goroutine count.
type slice struct {
	window     time.Duration
	sections   int
	perG       []int
	waits      []time.Duration // acquire latency
	holds      []time.Duration // acquire returned → release called
	releases   []time.Duration // release round trip
	idle       []time.Duration // previous release called → this acquire returned
	inversions int
	before     snapshot
	after      snapshot
}

// runner holds what every slice of a run shares.
type runner struct {
	addr    string
	prefix  string
	admin   *redis.Client
	clients int
	cs      time.Duration
	spin    bool
	warmup  time.Duration
}

// runSlice runs c goroutines of v on one key for warmup + d and measures the
// last d. window, when set, is called with true as the measured window opens
// and with false as it closes.
func (r *runner) runSlice(ctx context.Context, v variant, c int, key string, d time.Duration, window func(open bool)) (slice, error) {
	var sent atomic.Int64
	clients := make([]*redis.Client, r.clients)
	for i := range clients {
		clients[i] = redis.NewClient(&redis.Options{Addr: r.addr, PoolSize: 64})
		clients[i].AddHook(countHook{n: &sent})
	}
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	locks := v.build(r.prefix, clients)
	defer locks.close()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var secs []section
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for g := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				s := section{g: g, called: time.Now()}
				release, order, seq, err := locks.acquire(runCtx, g, key)
				if err != nil {
					if runCtx.Err() == nil {
						fail(fmt.Errorf("%s: acquire: %w", v.name, err))
					}
					return
				}
				s.acquired, s.order, s.seq = time.Now(), order, seq
				r.hold()
				s.relStart = time.Now()
				// The release runs to its end even when the run stops.
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(runCtx), 10*time.Second)
				err = release(rctx)
				rcancel()
				s.relEnd = time.Now()
				mu.Lock()
				secs = append(secs, s)
				mu.Unlock()
				if err != nil {
					fail(fmt.Errorf("%s: release: %w", v.name, err))
					return
				}
			}
		}()
	}
	sleepCtx(runCtx, r.warmup)
	if window != nil {
		window(true)
	}
	before := takeSnapshot(ctx, r.admin, sent.Load())
	sleepCtx(runCtx, d)
	after := takeSnapshot(ctx, r.admin, sent.Load())
	if window != nil {
		window(false)
	}
	cancel()
	wg.Wait()
	if firstErr != nil {
		return slice{}, firstErr
	}
	return measure(secs, c, before, after), nil
}

// hold is the critical section.
func (r *runner) hold() {
	if !r.spin {
		time.Sleep(r.cs)
		return
	}
	for t0 := time.Now(); time.Since(t0) < r.cs; {
		runtime.Gosched()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// measure keeps the sections acquired inside the window [before, after).
func measure(secs []section, c int, before, after snapshot) slice {
	s := slice{window: after.at.Sub(before.at), perG: make([]int, c), before: before, after: after}
	slices.SortFunc(secs, func(a, b section) int {
		if a.order != b.order {
			if a.order < b.order {
				return -1
			}
			return 1
		}
		return a.acquired.Compare(b.acquired)
	})
	in := func(x section) bool { return !x.acquired.Before(before.at) && x.acquired.Before(after.at) }
	var seqs []int64
	for i, x := range secs {
		if !in(x) {
			continue
		}
		s.sections++
		s.perG[x.g]++
		s.waits = append(s.waits, x.acquired.Sub(x.called))
		s.holds = append(s.holds, x.relStart.Sub(x.acquired))
		s.releases = append(s.releases, x.relEnd.Sub(x.relStart))
		if i > 0 && in(secs[i-1]) {
			s.idle = append(s.idle, x.acquired.Sub(secs[i-1].relStart))
		}
		if x.seq > 0 {
			seqs = append(seqs, x.seq)
		}
	}
	s.inversions = inversions(seqs)
	return s
}

// inversions counts pairs granted in the opposite order of their queueing.
func inversions(s []int64) int {
	if len(s) < 2 {
		return 0
	}
	mid := len(s) / 2
	left, right := slices.Clone(s[:mid]), slices.Clone(s[mid:])
	n := inversions(left) + inversions(right)
	i, j, k := 0, 0, 0
	for i < len(left) && j < len(right) {
		if left[i] <= right[j] {
			s[k] = left[i]
			i++
		} else {
			s[k] = right[j]
			n += len(left) - i
			j++
		}
		k++
	}
	k += copy(s[k:], left[i:])
	copy(s[k:], right[j:])
	return n
}

// total merges the slices of one variant at one goroutine count.
type total struct {
	window                       time.Duration
	sections                     int
	perG                         []int
	waits, holds, releases, idle []time.Duration
	inversions                   int
	sent                         int64
	clientCPU, redisCPU          time.Duration
	cmds                         map[string]cmdDelta
}

func (t *total) add(s slice) {
	t.window += s.window
	t.sections += s.sections
	if t.perG == nil {
		t.perG = make([]int, len(s.perG))
	}
	for i, n := range s.perG {
		t.perG[i] += n
	}
	t.waits = append(t.waits, s.waits...)
	t.holds = append(t.holds, s.holds...)
	t.releases = append(t.releases, s.releases...)
	t.idle = append(t.idle, s.idle...)
	t.inversions += s.inversions
	t.sent += s.after.sent - s.before.sent
	t.clientCPU += s.after.client - s.before.client
	t.redisCPU += s.after.redisCPU - s.before.redisCPU
	if t.cmds == nil {
		t.cmds = map[string]cmdDelta{}
	}
	for _, d := range commandDeltas(s.before, s.after) {
		c := t.cmds[d.name]
		c.name, c.calls, c.usec = d.name, c.calls+d.calls, c.usec+d.usec
		t.cmds[d.name] = c
	}
}

func (t *total) rate() float64 {
	if t.window <= 0 {
		return 0
	}
	return float64(t.sections) / t.window.Seconds()
}

// per divides by the number of sections.
func (t *total) per(v float64) float64 {
	if t.sections == 0 {
		return 0
	}
	return v / float64(t.sections)
}

func (t *total) jain() float64 {
	var sum, sq float64
	for _, c := range t.perG {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(t.perG)) * sq)
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(int(float64(len(s))*p), len(s)-1)]
}
