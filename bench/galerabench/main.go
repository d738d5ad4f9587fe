package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

type config struct {
	redisAddr  string
	dur        time.Duration
	rounds     int
	hotCallers int
	callers    int
}

func main() {
	var c config
	flag.StringVar(&c.redisAddr, "redis", envOr("REDIS_ADDR", "127.0.0.1:6379"), "Redis address")
	flag.DurationVar(&c.dur, "d", 5*time.Second, "length of each measured run")
	flag.IntVar(&c.rounds, "rounds", 2, "runs per workload and target, the targets alternating")
	flag.IntVar(&c.hotCallers, "hot-callers", 16, "callers on the one key of the hot workload")
	flag.IntVar(&c.callers, "callers", 64, "callers (and keys, one each) of the spread workload")
	flag.Parse()
	if c.dur <= 0 || c.rounds < 1 || c.hotCallers < 1 || c.callers < 1 {
		fmt.Fprintln(os.Stderr, "galerabench: -d, -rounds, -hot-callers and -callers must be positive")
		os.Exit(2)
	}
	// Calls cut off by the end of a run close their Redis connections, which
	// go-redis reports on its process-wide logger; the report is noise here.
	redis.SetLogger(quiet{})
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "galerabench:", err)
		os.Exit(1)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// target is where the callers write: the DSNs of the nodes they are spread
// over, in order.
type target struct {
	name string
	dsns []string
}

// instance is one application instance on one node.
type instance struct {
	locker *redislock.Locker
	db     *sqlx.DB
	g      *guard.Guard
}

// result is one measured run.
type result struct {
	ops, retries, errs int64
	dur                time.Duration
	lat                []time.Duration
}

func (r result) perSec() float64 { return float64(r.ops) / r.dur.Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

func run(c config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: c.redisAddr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("Redis at %s does not answer (set -redis or REDIS_ADDR): %w", c.redisAddr, err)
	}
	prefix := "galerabench:" + testenv.RandomHex(4)
	defer deleteKeys(rdb, prefix+"*")

	fmt.Println("starting one MariaDB server and a three-node Galera Cluster on loopback ...")
	single, err := testenv.StartGaleraStandalone(ctx)
	if err != nil {
		return err
	}
	defer single.Stop()
	start := time.Now()
	cluster, err := testenv.StartGalera(ctx)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	fmt.Printf("cluster up in %v\n\n", time.Since(start).Round(100*time.Millisecond))

	const dbName = "galerabench"
	targets := []target{
		{"single", []string{single.Nodes[0].DSN(dbName)}},
		{"cluster/1", []string{cluster.Nodes[0].DSN(dbName)}},
	}
	var spread []string
	for _, n := range cluster.Nodes {
		spread = append(spread, n.DSN(dbName))
	}
	targets = append(targets, target{"cluster/3", spread})
	var causal []string
	for _, dsn := range spread {
		causal = append(causal, dsn+"&wsrep_sync_wait=1")
	}
	targets = append(targets, target{"cluster/3c", causal})
	for _, g := range []*testenv.Galera{single, cluster} {
		if err := prepare(ctx, g.Nodes[0], dbName, c.callers); err != nil {
			return err
		}
	}

	workloads := []struct {
		name    string
		callers int
		keyOf   func(i int) int // row (and key) of caller i
	}{
		{"hot", c.hotCallers, func(int) int { return 0 }},
		{"spread", c.callers, func(i int) int { return i }},
	}
	fmt.Printf("guard.Do, read-modify-write of one row; %d run(s) of %v per target\n", c.rounds, c.dur)
	for _, w := range workloads {
		results := map[string]result{}
		for round := 0; round <= c.rounds; round++ { // round 0 warms up
			for _, t := range targets {
				d := c.dur
				if round == 0 {
					d = c.dur / 5
				}
				// Each run has locks of its own: waiters cut off by the end
				// of the previous run leave nothing in its way.
				runPrefix := fmt.Sprintf("%s:%s:%s:%d", prefix, w.name, t.name, round)
				r, err := measure(ctx, c.redisAddr, runPrefix, t, w.callers, w.keyOf, d)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", w.name, t.name, err)
				}
				if round > 0 {
					results[t.name] = merge(results[t.name], r)
				}
			}
		}
		report(w.name, w.callers, targets, results)
	}
	return nil
}

// prepare creates the database with the fence table and rows 0..rows-1.
func prepare(ctx context.Context, n *testenv.GaleraNode, name string, rows int) error {
	admin, err := sqlx.Open("mysql", n.DSN(""))
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	db, err := sqlx.Open("mysql", n.DSN(name))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Apply(ctx, db.DB); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE counters (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
		return err
	}
	var vals []string
	for i := range max(rows, 1) {
		vals = append(vals, fmt.Sprintf("(%d, 0)", i))
	}
	_, err = db.ExecContext(ctx, "INSERT INTO counters VALUES "+strings.Join(vals, ", "))
	return err
}

// measure runs callers on t for d: caller i works on row keyOf(i) through
// node i mod len(t.dsns).
func measure(ctx context.Context, redisAddr, prefix string, t target, callers int, keyOf func(int) int, d time.Duration) (result, error) {
	var retries, errs atomic.Int64
	perNode := (callers + len(t.dsns) - 1) / len(t.dsns)
	var instances []*instance
	defer func() {
		for _, in := range instances {
			_ = in.locker.Close()
			_ = in.db.Close()
		}
	}()
	rdbs := make([]*redis.Client, 0, len(t.dsns))
	defer func() {
		for _, r := range rdbs {
			_ = r.Close()
		}
	}()
	for _, dsn := range t.dsns {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: perNode + 4})
		rdbs = append(rdbs, rdb)
		db, err := sqlx.Open("mysql", dsn+"&interpolateParams=true")
		if err != nil {
			return result{}, err
		}
		db.SetMaxOpenConns(perNode)
		db.SetMaxIdleConns(perNode)
		in := &instance{db: db, locker: redislock.New(rdb, &redislock.Options{Prefix: prefix})}
		in.g = guard.New(in.locker, db, &guard.Options{MaxAttempts: 10, Hooks: guard.Hooks{
			OnRetry: func(string, int, error) { retries.Add(1) },
		}})
		instances = append(instances, in)
	}
	rctx, stop := context.WithTimeout(ctx, d)
	defer stop()
	lats := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	began := time.Now()
	for i := range callers {
		in := instances[i%len(instances)]
		row := keyOf(i)
		key := fmt.Sprintf("row:%d", row)
		wg.Go(func() {
			for rctx.Err() == nil {
				t0 := time.Now()
				err := in.g.Do(rctx, key, func(ctx context.Context, tx *guard.Tx) error {
					var n int64
					if err := tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = ?", row); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = ?", n+1, row)
					return err
				})
				switch {
				case err == nil:
					lats[i] = append(lats[i], time.Since(t0))
				case rctx.Err() != nil:
					// the run ended during this call
				default:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	r := result{dur: time.Since(began), retries: retries.Load(), errs: errs.Load()}
	for _, l := range lats {
		r.lat = append(r.lat, l...)
	}
	r.ops = int64(len(r.lat))
	slices.Sort(r.lat)
	if p := firstErr.Load(); p != nil && r.errs > r.ops/100 {
		return r, fmt.Errorf("%d of %d calls failed, first: %w", r.errs, r.errs+r.ops, *p)
	}
	return r, nil
}

func merge(a, b result) result {
	a.ops += b.ops
	a.retries += b.retries
	a.errs += b.errs
	a.dur += b.dur
	a.lat = append(a.lat, b.lat...)
	slices.Sort(a.lat)
	return a
}

func report(name string, callers int, targets []target, res map[string]result) {
	fmt.Printf("\n%s: %d callers\n", name, callers)
	fmt.Printf("  %-10s %10s %10s %10s %9s %7s\n", "target", "ops/s", "p50", "p99", "retries", "errors")
	for _, t := range targets {
		r := res[t.name]
		fmt.Printf("  %-10s %10.0f %10v %10v %9d %7d\n", t.name, r.perSec(),
			r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.retries, r.errs)
	}
	base := res["single"]
	for _, t := range targets[1:] {
		r := res[t.name]
		fmt.Printf("  %s / single: throughput x%.2f, p50 x%.2f, p99 x%.2f\n", t.name,
			r.perSec()/base.perSec(), ratio(r.pct(0.50), base.pct(0.50)), ratio(r.pct(0.99), base.pct(0.99)))
	}
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func deleteKeys(rdb *redis.Client, pattern string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		_ = rdb.Unlink(ctx, iter.Val()).Err()
	}
}
