package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

func main() {
	redisAddr := flag.String("redis", envOr("REDIS_ADDR", "127.0.0.1:6379"), "Redis address")
	mysqlDSN := flag.String("mysql", envOr("MYSQL_DSN", "root@tcp(127.0.0.1:3306)/"), "MySQL DSN (no database needed)")
	n := flag.Int("n", 2000, "operations per variant in the uncontended run")
	callers := flag.Int("callers", 256, "concurrent callers on the hot key")
	pool := flag.Int("pool", 16, "DB connection pool size in the hot-key run")
	dur := flag.Duration("d", 5*time.Second, "length of each hot-key run")
	interpolate := flag.Bool("interpolate", true, "interpolateParams: one round trip per statement instead of prepare+execute")
	only := flag.String("hot", "", "comma-separated hot-key variants to run besides MySQL-only: do (default: all)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the hot-key runs to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "guardbench:", err)
			os.Exit(1)
		}
		defer f.Close()
		profile = f
	}
	hotVariants = *only
	if err := run(*redisAddr, *mysqlDSN, *n, *callers, *pool, *dur, *interpolate); err != nil {
		fmt.Fprintln(os.Stderr, "guardbench:", err)
		os.Exit(1)
	}
}

// profile, when set, receives a CPU profile of the hot-key runs.
var profile *os.File

// hotVariants selects hot-key variants by short name; empty selects all.
var hotVariants string

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// counter counts round trips on the sockets it wraps.
type counter struct{ rt atomic.Int64 }

type countingConn struct {
	net.Conn
	c     *counter
	wrote atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	if c.wrote.Swap(false) {
		c.c.rt.Add(1)
	}
	return c.Conn.Read(p)
}

func (c *counter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

type setup struct {
	rdb          *redis.Client
	db           *sqlx.DB
	locker       *redislock.Locker
	g            *guard.Guard
	redisPort    string
	redisRT      *counter
	mysqlRT      *counter
	prefix, name string
}

func run(redisAddr, dsn string, n, callers, pool int, dur time.Duration, interpolate bool) error {
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer admin.Close()
	name := "rfbench_" + randomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+name) }()

	s := &setup{redisRT: &counter{}, mysqlRT: &counter{}, prefix: "guardbench:" + randomHex(4), name: name}
	if _, port, err := net.SplitHostPort(redisAddr); err == nil {
		s.redisPort = port
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: s.redisRT.dial, PoolSize: callers + 16})
	defer s.rdb.Close()
	defer func() {
		keys, _ := s.rdb.Keys(context.Background(), s.prefix+"*").Result()
		if len(keys) > 0 {
			_ = s.rdb.Del(context.Background(), keys...).Err()
		}
	}()
	cfg.DBName = name
	cfg.InterpolateParams = interpolate
	cfg.DialFunc = s.mysqlRT.dial
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	s.db = sqlx.NewDb(sql.OpenDB(conn), "mysql")
	defer s.db.Close()
	if err := migrations.Apply(ctx, s.db.DB); err != nil {
		return err
	}
	for _, q := range []string{
		"CREATE TABLE counters (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO counters VALUES (1, 0), (2, 0)",
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	s.locker = redislock.New(s.rdb, &redislock.Options{Prefix: s.prefix})
	defer s.locker.Close()
	s.g = guard.New(s.locker, s.db, nil)

	var ping []time.Duration
	for range 500 {
		t0 := time.Now()
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			return err
		}
		ping = append(ping, time.Since(t0))
	}
	fmt.Printf("servers: Redis %s, MySQL %s (database %s), interpolateParams=%v, Redis PING p50 %v\n\n",
		redisAddr, cfg.Addr, name, interpolate, pct(ping, 50))
	if err := uncontended(ctx, s, n); err != nil {
		return err
	}
	return hotKey(ctx, s, callers, pool, dur)
}

func bare(ctx context.Context, db *sqlx.DB) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + ? WHERE id = ?", 1, 2); err != nil {
		return err
	}
	return tx.Commit()
}

func uncontended(ctx context.Context, s *setup, n int) error {
	do := func() error {
		return s.g.Do(ctx, "uncontended", func(ctx context.Context, tx *guard.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + ? WHERE id = ?", 1, 2)
			return err
		})
	}
	variants := []struct {
		name string
		op   func() error
		lat  []time.Duration
		rRT  int64
		mRT  int64
	}{{name: "bare tx", op: func() error { return bare(ctx, s.db) }}, {name: "guard.Do", op: do}}
	for i := range variants { // warm up: pools, script cache
		for range 50 {
			if err := variants[i].op(); err != nil {
				return err
			}
		}
	}
	const block = 100
	for done := 0; done < n; done += block {
		for i := range variants {
			v := &variants[i]
			r0, m0 := s.redisRT.rt.Load(), s.mysqlRT.rt.Load()
			for range block {
				t0 := time.Now()
				if err := v.op(); err != nil {
					return err
				}
				v.lat = append(v.lat, time.Since(t0))
			}
			v.rRT += s.redisRT.rt.Load() - r0
			v.mRT += s.mysqlRT.rt.Load() - m0
		}
	}
	fmt.Printf("uncontended, %d operations each (interleaved in blocks of %d):\n", len(variants[0].lat), block)
	for _, v := range variants {
		ops := float64(len(v.lat))
		fmt.Printf("  %-9s p50 %8v  mean %8v  Redis RT/op %.2f  MySQL RT/op %.2f\n",
			v.name, pct(v.lat, 50), mean(v.lat), float64(v.rRT)/ops, float64(v.mRT)/ops)
	}
	b, d := variants[0], variants[1]
	fmt.Printf("  Do / bare: p50 %.2fx (+%v), mean %.2fx (+%v); extra round trips: Redis %+.2f, MySQL %+.2f\n\n",
		ratio(pct(d.lat, 50), pct(b.lat, 50)), pct(d.lat, 50)-pct(b.lat, 50),
		ratio(mean(d.lat), mean(b.lat)), mean(d.lat)-mean(b.lat),
		float64(d.rRT-b.rRT)/float64(len(d.lat)), float64(d.mRT-b.mRT)/float64(len(d.lat)))
	return nil
}

// readModifyWrite is the critical section of the hot-key run.
func readModifyWrite(ctx context.Context, tx *sqlx.Tx, lock string) error {
	var v int64
	if err := tx.GetContext(ctx, &v, "SELECT n FROM counters WHERE id = ?"+lock, 1); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = ?", v+1, 1)
	return err
}

func hotKey(ctx context.Context, s *setup, callers, pool int, dur time.Duration) error {
	s.db.SetMaxOpenConns(pool)
	s.db.SetMaxIdleConns(pool)
	mysqlOnly := func(ctx context.Context) error {
		tx, err := s.db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := readModifyWrite(ctx, tx, " FOR UPDATE"); err != nil {
			return err
		}
		return tx.Commit()
	}
	doWith := func(g *guard.Guard) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return g.Do(ctx, "hot", func(ctx context.Context, tx *guard.Tx) error {
				return readModifyWrite(ctx, tx.Tx, "")
			})
		}
	}
	type variant struct {
		short, name string
		op          func(context.Context) error
	}
	variants := []variant{{"mysql", "MySQL-only", mysqlOnly}}
	for _, v := range []variant{
		{"do", "guard.Do", doWith(s.g)},
	} {
		if hotVariants == "" || slices.Contains(strings.Split(hotVariants, ","), v.short) {
			variants = append(variants, v)
		}
	}
	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("hot key: %d callers, DB pool %d, %v per run, critical section SELECT n; UPDATE n = n+1:\n", callers, pool, dur)
	type result struct {
		ops    int
		lat    []time.Duration
		inUse  int
		rps    float64
		errors int
		cpu    cpuTimes
	}
	results := map[string]*result{}
	const rounds = 2
	for range rounds {
		for _, v := range variants {
			var before int64
			if err := s.db.GetContext(ctx, &before, "SELECT n FROM counters WHERE id = 1"); err != nil {
				return err
			}
			var mu sync.Mutex
			var lat []time.Duration
			var errs atomic.Int64
			stop := make(chan struct{})
			var maxInUse atomic.Int64
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tk := time.NewTicker(time.Millisecond)
				defer tk.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
						if u := int64(s.db.Stats().InUse); u > maxInUse.Load() {
							maxInUse.Store(u)
						}
					}
				}
			}()
			var wg sync.WaitGroup
			cpu0 := readCPU(s.redisPort)
			start := time.Now()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for {
						select {
						case <-stop:
							mu.Lock()
							lat = append(lat, mine...)
							mu.Unlock()
							return
						default:
						}
						t0 := time.Now()
						if err := v.op(ctx); err != nil {
							errs.Add(1)
							continue
						}
						mine = append(mine, time.Since(t0))
					}
				}()
			}
			time.Sleep(dur)
			close(stop)
			wg.Wait()
			elapsed := time.Since(start)
			cpu := readCPU(s.redisPort).sub(cpu0)
			<-sampled
			var after int64
			if err := s.db.GetContext(ctx, &after, "SELECT n FROM counters WHERE id = 1"); err != nil {
				return err
			}
			if after-before != int64(len(lat)) {
				return fmt.Errorf("%s: %d operations succeeded but the counter moved by %d", v.name, len(lat), after-before)
			}
			r := results[v.name]
			if r == nil {
				r = &result{}
				results[v.name] = r
			}
			r.ops += len(lat)
			r.lat = append(r.lat, lat...)
			r.rps += float64(len(lat)) / elapsed.Seconds() / rounds
			r.inUse = max(r.inUse, int(maxInUse.Load()))
			r.errors += int(errs.Load())
			r.cpu = r.cpu.add(cpu)
		}
	}
	for _, v := range variants {
		r := results[v.name]
		fmt.Printf("  %-10s %7.0f ops/s  p50 %9v  p99 %9v  max %9v  max DB conns in use %2d  errors %d  CPU µs/op: bench %.0f mysqld %.0f redis %.0f; machine idle %.0f%%\n",
			v.name, r.rps, pct(r.lat, 50), pct(r.lat, 99), pct(r.lat, 100), r.inUse, r.errors,
			r.cpu.self.perOp(r.ops), r.cpu.mysqld.perOp(r.ops), r.cpu.redis.perOp(r.ops), r.cpu.idlePct())
	}
	m := results["MySQL-only"]
	for _, v := range variants[1:] {
		d := results[v.name]
		fmt.Printf("  %-10s / MySQL-only: throughput %.2fx, p99 %.2fx\n", v.name, d.rps/m.rps, ratio(pct(d.lat, 99), pct(m.lat, 99)))
	}
	fmt.Printf("  (each figure: mean of %d alternating runs' throughput, pooled latencies)\n", rounds)
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i]
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t / time.Duration(len(d))
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
