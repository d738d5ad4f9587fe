package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/redislock"
)

// config is the command line.
type config struct {
	addr       string
	waiters    []int
	cs         time.Duration
	sleep      bool
	d          time.Duration
	rounds     int
	warmup     time.Duration
	clients    int
	bsmSpecs   []string
	bsmTTL     time.Duration
	only       string
	cpuprofile string
	profile    string
}

func main() {
	var c config
	var waiters, bsmList string
	flag.StringVar(&c.addr, "addr", envOr("REDIS_ADDR", "127.0.0.1:6379"), "Redis address")
	flag.StringVar(&waiters, "waiters", "2,8,32,128", "comma-separated goroutine counts, all on one key")
	flag.DurationVar(&c.cs, "cs", 100*time.Microsecond, "critical section length")
	flag.BoolVar(&c.sleep, "sleep", false, "spend the critical section in time.Sleep (which rounds short sleeps up, by how much depends on the process's activity) instead of spinning")
	flag.DurationVar(&c.d, "d", 3*time.Second, "measured time per variant at each goroutine count, split over -rounds")
	flag.IntVar(&c.rounds, "rounds", 3, "slices per variant and goroutine count; the variants alternate between slices")
	flag.DurationVar(&c.warmup, "warmup", 200*time.Millisecond, "unmeasured start of every slice")
	flag.IntVar(&c.clients, "clients", 4, "Redis clients (and redislock Lockers) the goroutines are spread over, as separate processes would be")
	flag.StringVar(&bsmList, "bsm", "linear:1ms,exp:16ms:64ms", "bsm/redislock retry strategies: linear:INTERVAL (LinearBackoff) or exp:MIN:MAX (ExponentialBackoff)")
	flag.DurationVar(&c.bsmTTL, "bsm-ttl", 30*time.Second, "bsm/redislock lock TTL (redislock's LeaseTTL default is the same)")
	flag.StringVar(&c.only, "only", "", "comma-separated variant names to run (default: all)")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of one extra run, chosen with -profile, to this file")
	flag.StringVar(&c.profile, "profile", "redislock@128", "the run -cpuprofile profiles: variant@goroutines, measured for -d")
	flag.Parse()
	var err error
	if c.waiters, err = parseCounts(waiters); err == nil {
		c.bsmSpecs = strings.Split(bsmList, ",")
		err = run(c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockpeer:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(c config) error {
	if c.rounds < 1 || c.clients < 1 || c.d <= 0 {
		return fmt.Errorf("-rounds, -clients and -d must be positive")
	}
	variants := []variant{redfenceVariant(), redfenceFixedVariant()}
	for _, spec := range c.bsmSpecs {
		v, err := bsmVariant(strings.TrimSpace(spec), c.bsmTTL)
		if err != nil {
			return err
		}
		variants = append(variants, v)
	}
	variants = slices.DeleteFunc(variants, func(v variant) bool { return !variantFilter(c.only, v.name) })
	if len(variants) == 0 {
		return fmt.Errorf("-only %q selects no variant", c.only)
	}

	var b [4]byte
	_, _ = rand.Read(b[:])
	ctx := context.Background()
	r := &runner{addr: c.addr, prefix: "lockpeer:" + hex.EncodeToString(b[:]), clients: c.clients,
		cs: c.cs, spin: !c.sleep, warmup: c.warmup}
	r.admin = redis.NewClient(&redis.Options{Addr: c.addr})
	defer r.admin.Close()
	if err := r.admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("Redis at %s does not answer (set -addr or REDIS_ADDR): %w", c.addr, err)
	}
	defer cleanup(r.admin, r.prefix)

	hold := "spinning"
	if c.sleep {
		hold = "time.Sleep"
	}
	fmt.Printf("lockpeer against %s, one key per run, critical section %v (%s), %v per variant and goroutine count\n",
		c.addr, c.cs, hold, c.d)
	fmt.Printf("in %d alternating slices (+%v warm-up each), goroutines spread over %d clients\n", c.rounds, c.warmup, c.clients)
	for _, v := range variants {
		fmt.Printf("  %-22s %s\n", v.name, v.about)
	}
	fmt.Printf("  (github.com/bsm/redislock %s)\n", depVersion("github.com/bsm/redislock"))
	printBackground(ctx, r.admin, time.Second)
	fmt.Println()

	slice := c.d / time.Duration(c.rounds)
	results := map[string]map[int]*total{}
	for _, v := range variants {
		results[v.name] = map[int]*total{}
	}
	printHeader()
	for _, n := range c.waiters {
		for round := range c.rounds {
			order := slices.Clone(variants)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, v := range order {
				key := fmt.Sprintf("c%d-r%d-%s", n, round, v.name)
				s, err := r.runSlice(ctx, v, n, key, slice, nil)
				if err != nil {
					return err
				}
				t := results[v.name][n]
				if t == nil {
					t = &total{}
					results[v.name][n] = t
				}
				t.add(s)
			}
		}
		for _, v := range variants {
			printRow(n, v.name, results[v.name][n])
		}
	}
	fmt.Println()
	printLegend()
	fmt.Println("\nRedis server side, per critical section (INFO commandstats; calls made inside scripts are")
	fmt.Println("listed too, and their time is also inside the script's):")
	for _, n := range c.waiters {
		for _, v := range variants {
			printServer(n, v.name, results[v.name][n])
		}
	}
	fmt.Println()
	printSummary(c.waiters, variants, results)

	if c.cpuprofile != "" {
		return profileRun(ctx, r, c, variants)
	}
	return nil
}

// profileRun repeats one variant's run with the CPU profiler on during its
// measured window.
func profileRun(ctx context.Context, r *runner, c config, variants []variant) error {
	name, count, ok := strings.Cut(c.profile, "@")
	n, err := strconv.Atoi(count)
	i := slices.IndexFunc(variants, func(v variant) bool { return v.name == name })
	if !ok || err != nil || n < 1 || i < 0 {
		return fmt.Errorf("-profile %q: want variant@goroutines with a variant of this run", c.profile)
	}
	f, err := os.Create(c.cpuprofile)
	if err != nil {
		return err
	}
	defer f.Close()
	var perr error
	s, err := r.runSlice(ctx, variants[i], n, fmt.Sprintf("c%d-profile-%s", n, name), c.d, func(open bool) {
		if open {
			perr = pprof.StartCPUProfile(f)
		} else if perr == nil {
			pprof.StopCPUProfile()
		}
	})
	if err != nil {
		return err
	}
	if perr != nil {
		return perr
	}
	t := &total{}
	t.add(s)
	fmt.Printf("\nprofiled run (CPU profile of this process in %s):\n", c.cpuprofile)
	printHeader()
	printRow(n, name, t)
	printServer(n, name, t)
	if name == "redislock" {
		// Every grant reads and rewrites the token key and every release adds
		// to the released record: their sizes are part of each script's cost.
		if names, err := redislock.KeyNamesFor(r.prefix, fmt.Sprintf("c%d-profile-%s", n, name)); err == nil {
			fmt.Printf("after the run: token key %d bytes, released record %d entries\n",
				r.admin.StrLen(ctx, names.Token).Val(), r.admin.LLen(ctx, names.Released).Val())
		}
	}
	return f.Close()
}

// printBackground measures what other clients make the server do while this
// program sends nothing: INFO commandstats and CPU figures include it.
func printBackground(ctx context.Context, admin *redis.Client, d time.Duration) {
	a := takeSnapshot(ctx, admin, 0)
	time.Sleep(d)
	b := takeSnapshot(ctx, admin, 0)
	var calls int64
	for _, x := range commandDeltas(a, b) {
		calls += x.calls
	}
	sec := b.at.Sub(a.at).Seconds()
	fmt.Printf("other clients of the server before the run: %.0f calls/s, redis-server CPU %.0f ms/s\n",
		float64(calls)/sec, float64(b.redisCPU-a.redisCPU)/float64(time.Millisecond)/sec)
}

func printHeader() {
	fmt.Printf("%5s %-22s %8s %9s %9s %9s %9s %9s %9s %8s %6s %6s %9s %9s\n", "c", "variant", "cs/s",
		"acq p50", "acq p99", "acq max", "hold p50", "rel p50", "idle p50", "cmds/cs", "inv", "jain", "cli µs/cs", "rds µs/cs")
}

func printRow(n int, name string, t *total) {
	inv := "-"
	if strings.HasPrefix(name, "redislock") {
		inv = strconv.Itoa(t.inversions)
	}
	fmt.Printf("%5d %-22s %8.0f %9s %9s %9s %9s %9s %9s %8.2f %6s %6.3f %9.1f %9.1f\n", n, name, t.rate(),
		short(pct(t.waits, 0.5)), short(pct(t.waits, 0.99)), short(pct(t.waits, 1)),
		short(pct(t.holds, 0.5)), short(pct(t.releases, 0.5)), short(pct(t.idle, 0.5)),
		t.per(float64(t.sent)), inv, t.jain(),
		t.per(float64(t.clientCPU.Microseconds())), t.per(float64(t.redisCPU.Microseconds())))
}

func printLegend() {
	fmt.Println("cs/s: critical sections per second; acq: Lock/Obtain call → return; hold: the critical")
	fmt.Println("section as measured; rel: Unlock/Release round trip; idle: one holder's release call →")
	fmt.Println("the next holder's acquire return (the lock is busy with neither critical section);")
	fmt.Println("cmds/cs: commands sent by the variant's clients (hook), per section; inv: FIFO inversions")
	fmt.Println("(grant order by token against queue order in Redis); jain: fairness over goroutines;")
	fmt.Println("cli/rds µs/cs: CPU time of this process / of redis-server per section.")
}

func printServer(n int, name string, t *total) {
	ds := make([]cmdDelta, 0, len(t.cmds))
	for _, d := range t.cmds {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b cmdDelta) int {
		if a.usec != b.usec {
			if a.usec > b.usec {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%s %.2f×%.1fµs", d.name, t.per(float64(d.calls)), float64(d.usec)/float64(d.calls)))
	}
	fmt.Printf("%5d %-22s %s\n", n, name, strings.Join(parts, ", "))
}

// printSummary prints one line: redislock's critical sections per second
// against the faster bsm/redislock setting at each goroutine count.
func printSummary(waiters []int, variants []variant, results map[string]map[int]*total) {
	own, ok := results["redislock"]
	if !ok || len(variants) < 2 {
		return
	}
	var parts []string
	for _, n := range waiters {
		best, bestName := 0.0, ""
		for _, v := range variants {
			if strings.HasPrefix(v.name, "redislock") {
				continue
			}
			if r := results[v.name][n].rate(); r > best {
				best, bestName = r, v.name
			}
		}
		if best > 0 {
			parts = append(parts, fmt.Sprintf("c=%d %.2fx (%s)", n, own[n].rate()/best, strings.TrimPrefix(bestName, "bsm-")))
		}
	}
	line := "summary redislock/bsm cs/s, against the faster bsm setting: " + strings.Join(parts, "  ")
	if bg, ok := results["redislock-bg"]; ok {
		var bgParts []string
		for _, n := range waiters {
			if own[n].rate() > 0 {
				bgParts = append(bgParts, fmt.Sprintf("c=%d %.2fx", n, bg[n].rate()/own[n].rate()))
			}
		}
		line += "; redislock-bg/redislock: " + strings.Join(bgParts, "  ")
	}
	fmt.Println(line)
}

func short(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

func depVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "(version unknown)"
}

// cleanup deletes every key the run wrote.
func cleanup(c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Unlink(ctx, iter.Val())
	}
}
