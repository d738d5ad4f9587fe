package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/redislock"
)

func main() {
	addr := flag.String("addr", envOr("REDIS_ADDR", "127.0.0.1:6379"), "Redis address")
	n := flag.Int("n", 2000, "samples for the latency figures")
	waiters := flag.String("waiters", "8,32,128", "comma-separated goroutine counts for the contention runs")
	cs := flag.Duration("cs", 100*time.Microsecond, "critical section length in the contention runs")
	dur := flag.Duration("d", 3*time.Second, "length of each contention run")
	lockers := flag.Int("lockers", 4, "Lockers (each with its own client, as separate processes would have) sharing the goroutines")
	flag.DurationVar(&waiterTimeout, "waiter-timeout", 0, "Options.WaiterTimeout of the contention runs (0: default)")
	flag.DurationVar(&recheck, "recheck", 0, "Options.RecheckInterval of the contention runs (0: default)")
	flag.Parse()
	if err := run(*addr, *n, *waiters, *cs, *dur, *lockers); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Options of the contention runs, from flags.
var waiterTimeout, recheck time.Duration

type bench struct {
	addr     string
	prefix   string
	counter  atomic.Int64 // commands sent by the benchmark's clients
	renewals atomic.Int64 // renewal scripts among them
	clients  []*redis.Client
}

func run(addr string, n int, waiterList string, cs, dur time.Duration, nLockers int) error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	bn := &bench{addr: addr, prefix: "lockbench:" + hex.EncodeToString(b[:])}
	defer bn.cleanup()
	ctx := context.Background()
	admin := bn.client()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("Redis at %s does not answer (set -addr or REDIS_ADDR): %w", addr, err)
	}
	fmt.Printf("redislock benchmark against %s (%d samples)\n\n", addr, n)

	// PING and uncontended Lock+Unlock, interleaved so that both see the same
	// machine load.
	l1 := redislock.New(bn.client(), &redislock.Options{Prefix: bn.prefix})
	defer l1.Close()
	var pings, locks []time.Duration
	for i := range n + n/10 {
		t0 := time.Now()
		if err := admin.Ping(ctx).Err(); err != nil {
			return err
		}
		t1 := time.Now()
		lk, err := l1.Lock(ctx, "uncontended")
		if err != nil {
			return err
		}
		if err := lk.Unlock(ctx); err != nil {
			return err
		}
		t2 := time.Now()
		if i >= n/10 { // warm-up excluded
			pings = append(pings, t1.Sub(t0))
			locks = append(locks, t2.Sub(t1))
		}
	}
	ping := p50(pings)
	fmt.Printf("%-40s %10v\n", "PING p50", ping)
	fmt.Printf("%-40s %10v  = %.2f x PING p50 (target <= 2.5)\n", "uncontended Lock+Unlock p50", p50(locks), ratio(p50(locks), ping))

	handoff, fromStart, err := bn.handOff(ctx, n/2)
	if err != nil {
		return err
	}
	fmt.Printf("%-40s %10v  = %.2f x PING p50 (target <= 1.5)\n", "hand-off Unlock return -> Lock return p50", handoff, ratio(handoff, ping))
	fmt.Printf("%-40s %10v  = %.2f x PING p50\n", "hand-off Unlock call -> Lock return p50", fromStart, ratio(fromStart, ping))

	fmt.Printf("\ncontention: one key, critical section %v, %v per run, goroutines spread over %d Lockers\n", cs, dur, nLockers)
	fmt.Printf("%8s %10s %12s %11s %8s %13s %14s %14s\n", "waiters", "sections", "sections/s", "inversions", "jain",
		"cmds/section", "renews/section", "server calls/s.")
	for _, f := range strings.Split(waiterList, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return fmt.Errorf("bad -waiters entry %q", f)
		}
		r, err := bn.contention(ctx, w, nLockers, cs, dur)
		if err != nil {
			return err
		}
		fmt.Printf("%8d %10d %12.0f %11d %8.4f %13.3f %14.4f %14.2f\n", w, r.sections, float64(r.sections)/dur.Seconds(),
			r.inversions, r.jain, r.cmdsPerSection, r.renewsPerSection, r.serverCmdsPerSection)
	}
	fmt.Println("\ncmds/section: commands sent by this program's clients per critical section;")
	fmt.Println("renews/section: the renewal scripts among them.")
	fmt.Println("server calls/s.: INFO commandstats delta per section; counts the calls made inside")
	fmt.Println("scripts too, and those of any other client of the server.")
	return nil
}

// client returns a client whose commands are counted and whose not-granted
// acquire replies are reported to the attempt recorded in the context.
func (bn *bench) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: bn.addr, PoolSize: 64})
	c.AddHook(&hook{bn: bn})
	bn.clients = append(bn.clients, c)
	return c
}

func (bn *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: bn.addr})
	defer c.Close()
	iter := c.Scan(ctx, 0, bn.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Unlink(ctx, iter.Val())
	}
	for _, cl := range bn.clients {
		_ = cl.Close()
	}
}

// handOff ping-pongs one key between two Lockers: each round the other one
// queues, then the holder unlocks.
func (bn *bench) handOff(ctx context.Context, n int) (p50Return, p50Start time.Duration, err error) {
	admin := bn.client()
	ls := []*redislock.Locker{
		redislock.New(bn.client(), &redislock.Options{Prefix: bn.prefix}),
		redislock.New(bn.client(), &redislock.Options{Prefix: bn.prefix}),
	}
	defer ls[0].Close()
	defer ls[1].Close()
	names, err := redislock.KeyNamesFor(bn.prefix, "handoff")
	if err != nil {
		return 0, 0, err
	}
	holder, err := ls[0].Lock(ctx, "handoff")
	if err != nil {
		return 0, 0, err
	}
	var fromReturn, fromStart []time.Duration
	for i := range n + n/10 {
		type got struct {
			lk  *redislock.Lock
			at  time.Time
			err error
		}
		next := make(chan got, 1)
		go func() {
			lk, err := ls[(i+1)%2].Lock(ctx, "handoff")
			next <- got{lk, time.Now(), err}
		}()
		for admin.ZCard(ctx, names.Queue).Val() == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		start := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			return 0, 0, err
		}
		returned := time.Now()
		g := <-next
		if g.err != nil {
			return 0, 0, g.err
		}
		if i >= n/10 {
			fromReturn = append(fromReturn, max(g.at.Sub(returned), 0))
			fromStart = append(fromStart, g.at.Sub(start))
		}
		holder = g.lk
	}
	return p50(fromReturn), p50(fromStart), holder.Unlock(ctx)
}

type contentionResult struct {
	sections             int
	inversions           int
	jain                 float64
	cmdsPerSection       float64
	renewsPerSection     float64
	serverCmdsPerSection float64
}

type attemptKey struct{}

// attempt receives the queue sequence of the Lock call it is attached to.
type attempt struct{ seq atomic.Int64 }

type grant struct {
	token uint64
	seq   int64 // 0 when granted without queueing
}

func (bn *bench) contention(ctx context.Context, waiters, nLockers int, cs, dur time.Duration) (contentionResult, error) {
	admin := bn.client()
	key := "contended-" + strconv.Itoa(waiters)
	ls := make([]*redislock.Locker, nLockers)
	for i := range ls {
		ls[i] = redislock.New(bn.client(), &redislock.Options{Prefix: bn.prefix,
			WaiterTimeout: waiterTimeout, RecheckInterval: recheck})
		defer ls[i].Close()
	}
	var mu sync.Mutex
	var grants []grant
	counts := make([]int, waiters)
	var firstErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	before := serverCalls(ctx, admin)
	cmdsBefore, renewsBefore := bn.counter.Load(), bn.renewals.Load()
	for g := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[g%nLockers]
			for {
				select {
				case <-stop:
					return
				default:
				}
				at := &attempt{}
				lk, err := l.Lock(context.WithValue(ctx, attemptKey{}, at), key)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mu.Lock()
				grants = append(grants, grant{lk.Token(), at.seq.Load()})
				counts[g]++
				mu.Unlock()
				time.Sleep(cs)
				if err := lk.Unlock(ctx); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	after := serverCalls(ctx, admin)
	cmds, renews := bn.counter.Load()-cmdsBefore, bn.renewals.Load()-renewsBefore
	if firstErr != nil {
		return contentionResult{}, firstErr
	}
	slices.SortFunc(grants, func(a, b grant) int {
		if a.token < b.token {
			return -1
		}
		return 1
	})
	var seqs []int64
	for _, g := range grants {
		if g.seq > 0 {
			seqs = append(seqs, g.seq)
		}
	}
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	r := contentionResult{sections: len(grants), inversions: inversions(seqs)}
	if sq > 0 {
		r.jain = sum * sum / (float64(len(counts)) * sq)
	}
	if len(grants) > 0 {
		r.cmdsPerSection = float64(cmds) / float64(len(grants))
		r.renewsPerSection = float64(renews) / float64(len(grants))
		r.serverCmdsPerSection = float64(after-before) / float64(len(grants))
	}
	return r, nil
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

// serverCalls sums the calls of every command in INFO commandstats.
func serverCalls(ctx context.Context, c *redis.Client) int64 {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		v, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
	}
	return total
}

func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// isRenewal tells a renewal script call by its keys: lock keys only (the
// other scripts also take a lock's queue keys).
func isRenewal(args []any) bool {
	if len(args) < 4 {
		return false
	}
	if name, _ := args[0].(string); name != "evalsha" && name != "eval" {
		return false
	}
	nk, _ := args[2].(int)
	if nk < 1 || len(args) < 3+nk {
		return false
	}
	for _, k := range args[3 : 3+nk] {
		if s, _ := k.(string); !strings.HasSuffix(s, ":lock") {
			return false
		}
	}
	return true
}

// hook counts commands (and renewals among them) and hands the queue sequence of a not-granted acquire
// reply ({0, "", pttl, head, seq}) to the attempt in the context.
type hook struct{ bn *bench }

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.bn.counter.Add(1)
		if isRenewal(cmd.Args()) {
			h.bn.renewals.Add(1)
		}
		err := next(ctx, cmd)
		if at, ok := ctx.Value(attemptKey{}).(*attempt); ok && err == nil {
			if c, ok := cmd.(*redis.Cmd); ok {
				if res, ok := c.Val().([]any); ok && len(res) == 5 && res[0] == int64(0) {
					if seq, ok := res[4].(int64); ok {
						at.seq.CompareAndSwap(0, seq)
					}
				}
			}
		}
		return err
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.bn.counter.Add(int64(len(cmds)))
		for _, c := range cmds {
			if isRenewal(c.Args()) {
				h.bn.renewals.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
