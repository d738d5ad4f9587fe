package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

// config is what the flags set.
type config struct {
	redisAddr, dsn string
	modes          []string
	n              int           // uncontended operations per variant
	callers        int           // hot mode: callers on the hot key
	hotCallers     int           // mixed mode: callers on the hot key
	coldCallers    int           // mixed mode: callers on random cold rows
	coldRows       int           // mixed mode: rows of the cold table
	pool           int           // DB pool of the contended modes
	dur            time.Duration // each contended run
	rounds         int           // contended runs per variant, alternating
	rtt            time.Duration // delay before every request on every connection
	steps          bool          // time the stages of each Do in uncontended mode
	interpolate    bool
	variants       string   // -hot: variants besides SELECT ... FOR UPDATE
	profile        *os.File // CPU profile of one guard.Do run, or nil
	profileVariant string   // the variant profiled
	opTimeout      time.Duration
	opTimeoutSet   bool
	maxBatch       int  // guard.Options.MaxBatch of the Guard under test
	batch          int  // guard.Options.MaxBatch of the batch variants
	newKeys        bool // no fence rows before the runs
}

// modeNames are the modes in the order they run by default.
var modeNames = []string{"uncontended", "hot", "mixed"}

// mixedOpTimeout is the per-operation timeout of the mixed mode when
// -op-timeout is not given: services bound their requests, and with a ctx
// that can end guard.Do sends COMMIT as a statement bound to it.
const mixedOpTimeout = 30 * time.Second

func main() {
	var c config
	flag.StringVar(&c.redisAddr, "redis", envOr("REDIS_ADDR", "127.0.0.1:6379"), "Redis address")
	flag.StringVar(&c.dsn, "mysql", envOr("MYSQL_DSN", "root@tcp(127.0.0.1:3306)/"), "MySQL DSN (no database needed)")
	modes := flag.String("mode", strings.Join(modeNames, ","), "comma-separated modes to run, in this order: uncontended, hot (one hot key), mixed (a hot key beside cold rows, one pool)")
	flag.IntVar(&c.n, "n", 2000, "operations per variant in the uncontended mode")
	flag.IntVar(&c.callers, "callers", 256, "callers on the hot key in the hot mode")
	flag.IntVar(&c.hotCallers, "hot-callers", 128, "callers on the hot key in the mixed mode")
	flag.IntVar(&c.coldCallers, "cold-callers", 32, "callers on random cold rows in the mixed mode")
	flag.IntVar(&c.coldRows, "cold-rows", 10000, "rows of the cold table in the mixed mode (one key each)")
	flag.IntVar(&c.pool, "pool", 16, "DB connection pool size in the hot and mixed modes")
	flag.DurationVar(&c.dur, "d", 5*time.Second, "length of each run in the hot and mixed modes")
	flag.IntVar(&c.rounds, "rounds", 2, "runs per variant in the hot and mixed modes, the variants alternating")
	flag.IntVar(&c.maxBatch, "maxbatch", 0, "guard.Options.MaxBatch of the do, atend, handoff and relay variants (0: off)")
	flag.IntVar(&c.batch, "batch", 16, "guard.Options.MaxBatch of the batch, batchsp and batchatend variants")
	flag.DurationVar(&c.rtt, "rtt", 0, "hold back every request written on every Redis and MySQL connection by this long, as between hosts (0: none)")
	flag.BoolVar(&c.interpolate, "interpolate", true, "interpolateParams: one round trip per statement instead of prepare+execute")
	flag.BoolVar(&c.steps, "steps", false, "uncontended mode: time the stages of each Do (Hooks.OnStep) and print their means per variant; the hook costs each Do a little")
	flag.BoolVar(&c.newKeys, "new-keys", false, "start without fence rows, so that each key's first Do creates its row (default: every key's row exists, as for items sold before)")
	flag.StringVar(&c.variants, "hot", "", "comma-separated variants to run besides SELECT ... FOR UPDATE in the hot and mixed modes: do (guard.Do, default options), atend (HandOffAtEnd and NoRelay), handoff (NoRelay: hand-off at the claim alone), relay (HandOffAtEnd: relaying alone), batch (MaxBatch -batch), batchsp (with BatchSavepoints), batchatend (with HandOffAtEnd and NoRelay), ride (ClaimWithFirstStatement), read (DoRead: the SELECT sent with the claim) (default: do, atend, handoff, relay, ride, read)")
	flag.StringVar(&c.profileVariant, "cpuprofile-variant", "do", "the variant -cpuprofile profiles: do, atend, handoff, relay, batch, batchsp, batchatend, ride or read")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process during the last guard.Do run of the hot mode (of the mixed mode when the hot mode is not run) to this file")
	flag.DurationVar(&c.opTimeout, "op-timeout", 0, "give every operation a ctx with this timeout, as services do (default: none in the uncontended and hot modes, whose COMMIT then cannot be cut short; 30s in the mixed mode)")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { c.opTimeoutSet = c.opTimeoutSet || f.Name == "op-timeout" })
	c.modes = strings.Split(*modes, ",")
	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "guardbench:", err)
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "guardbench:", err)
			os.Exit(1)
		}
		defer f.Close()
		c.profile = f
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "guardbench:", err)
		os.Exit(1)
	}
}

func (c config) check() error {
	for _, m := range c.modes {
		if !slices.Contains(modeNames, m) {
			return fmt.Errorf("-mode: unknown mode %q (want %s)", m, strings.Join(modeNames, ", "))
		}
	}
	switch {
	case c.n < 1, c.callers < 1, c.pool < 1, c.rounds < 1, c.coldRows < 1:
		return fmt.Errorf("-n, -callers, -pool, -rounds and -cold-rows must be at least 1")
	case c.hotCallers < 0, c.coldCallers < 0, c.hotCallers+c.coldCallers == 0:
		return fmt.Errorf("-hot-callers and -cold-callers must not be negative, nor both 0")
	case c.rtt < 0, c.dur <= 0, c.opTimeout < 0, c.maxBatch < 0:
		return fmt.Errorf("-rtt, -d, -op-timeout and -maxbatch must not be negative")
	}
	return nil
}

// opTimeoutFor is the per-operation timeout of mode.
func (c config) opTimeoutFor(mode string) time.Duration {
	if c.opTimeoutSet || mode != "mixed" {
		return c.opTimeout
	}
	return mixedOpTimeout
}

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

// setup is what the modes share: the clients, the meters on their sockets and
// the tally of their transactions.
type setup struct {
	cfg          config
	rdb          *redis.Client
	db           *sqlx.DB
	admin        *sql.DB // undelayed, unmetered: setup and checks
	locker       *redislock.Locker
	g            *guard.Guard
	gAtEnd       *guard.Guard // g with HandOffAtEnd and NoRelay
	gRide        *guard.Guard // g with ClaimWithFirstStatement
	gHandOff     *guard.Guard // g with NoRelay (hand-off at the claim alone)
	gRelay       *guard.Guard // g with HandOffAtEnd (relaying alone)
	gBatch       *guard.Guard // Options.MaxBatch -batch
	gBatchSP     *guard.Guard // gBatch with Options.BatchSavepoints
	gBatchAtEnd  *guard.Guard // gBatch with HandOffAtEnd and NoRelay
	servers      servers
	redis, mysql *meter
	tally        *txTally
	stepLog      atomic.Pointer[reqLog] // with -steps, where Do's stages are timed
	prefix       string
	profiled     bool
}

// bounded runs op with a ctx bounded by d (none when d is 0).
func bounded(ctx context.Context, d time.Duration, op func(context.Context) error) error {
	if d <= 0 {
		return op(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return op(ctx)
}

func run(c config) error {
	ctx := context.Background()
	mcfg, err := mysql.ParseDSN(c.dsn)
	if err != nil {
		return err
	}
	admin, err := sql.Open("mysql", mcfg.FormatDSN())
	if err != nil {
		return err
	}
	defer admin.Close()
	name := "rfbench_" + randomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+name) }()

	s := &setup{cfg: c, redis: &meter{delay: c.rtt, label: redisLabel}, mysql: &meter{delay: c.rtt, label: mysqlLabel}, tally: &txTally{},
		prefix: "guardbench:" + randomHex(4)}
	callers := max(c.callers, c.hotCallers+c.coldCallers)
	s.rdb = redis.NewClient(&redis.Options{Addr: c.redisAddr, Dialer: s.redis.dial, PoolSize: callers + 16})
	defer s.rdb.Close()
	defer func() {
		keys, _ := s.rdb.Keys(context.Background(), s.prefix+"*").Result()
		if len(keys) > 0 {
			_ = s.rdb.Del(context.Background(), keys...).Err()
		}
	}()
	mcfg.DBName = name
	mcfg.InterpolateParams = c.interpolate
	mcfg.DialFunc = s.mysql.dial
	conn, err := mysql.NewConnector(mcfg)
	if err != nil {
		return err
	}
	s.db = sqlx.NewDb(sql.OpenDB(&talliedConnector{Connector: conn, tally: s.tally}), "mysql")
	defer s.db.Close()
	mcfg.DialFunc = nil
	if s.admin, err = sql.Open("mysql", mcfg.FormatDSN()); err != nil {
		return err
	}
	defer s.admin.Close()
	if err := migrations.Apply(ctx, s.admin); err != nil {
		return err
	}
	if err := createTables(ctx, s.admin, c.coldRows); err != nil {
		return err
	}
	s.locker = redislock.New(s.rdb, &redislock.Options{Prefix: s.prefix})
	defer s.locker.Close()
	var hooks guard.Hooks
	if c.steps {
		hooks.OnStep = func(_ context.Context, st guard.Step) {
			if l := s.stepLog.Load(); l != nil {
				l.add(st.Kind.String(), st.Duration)
			}
		}
	}
	s.g = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.maxBatch, Hooks: hooks})
	s.gRide = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.maxBatch, ClaimWithFirstStatement: true, Hooks: hooks})
	s.gAtEnd = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.maxBatch, HandOff: guard.HandOffAtEnd, NoRelay: true, Hooks: hooks})
	s.gHandOff = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.maxBatch, NoRelay: true})
	s.gRelay = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.maxBatch, HandOff: guard.HandOffAtEnd})
	s.gBatch = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.batch})
	s.gBatchSP = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.batch, BatchSavepoints: true})
	s.gBatchAtEnd = guard.New(s.locker, s.db, &guard.Options{MaxBatch: c.batch, HandOff: guard.HandOffAtEnd, NoRelay: true})

	if !c.newKeys {
		if err := createFences(ctx, s.admin, s.g, c.coldRows); err != nil {
			return err
		}
	}

	s.servers = findServers(mcfg.Addr, c.redisAddr)
	if err := s.printServers(ctx, mcfg.Addr, name); err != nil {
		return err
	}
	for _, m := range c.modes {
		var err error
		switch m {
		case "uncontended":
			err = uncontended(ctx, s, c.n, c.opTimeoutFor(m))
		case "hot":
			err = s.contended(ctx, contention{mode: m, hot: c.callers, opTimeout: c.opTimeoutFor(m)})
		case "mixed":
			err = s.contended(ctx, contention{mode: m, hot: c.hotCallers, cold: c.coldCallers, opTimeout: c.opTimeoutFor(m)})
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	return nil
}

// createTables creates the hot counters (row 1: the hot key, row 2: the
// uncontended run's) and the cold table of rows rows.
func createTables(ctx context.Context, db *sql.DB, rows int) error {
	for _, q := range []string{
		"CREATE TABLE counters (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO counters VALUES (1, 0), (2, 0)",
		"CREATE TABLE cold (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	const batch = 1000
	for lo := 1; lo <= rows; lo += batch {
		var b strings.Builder
		b.WriteString("INSERT INTO cold VALUES ")
		for id := lo; id < lo+batch && id <= rows; id++ {
			if id > lo {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,0)", id)
		}
		if _, err := db.ExecContext(ctx, b.String()); err != nil {
			return err
		}
	}
	return nil
}

// createFences creates the fence rows of every key the runs use, with token
// 0, as fence.Ensure would: the state of a shop whose items have all been
// sold before. Without them (-new-keys), each key's first Do also creates
// its row.
func createFences(ctx context.Context, db *sql.DB, g *guard.Guard, rows int) error {
	keys := []string{"hot", "uncontended"}
	for id := 1; id <= rows; id++ {
		keys = append(keys, "cold:"+strconv.Itoa(id))
	}
	const batch = 1000
	for lo := 0; lo < len(keys); lo += batch {
		part := keys[lo:min(lo+batch, len(keys))]
		args := make([]any, len(part))
		for i, k := range part {
			args[i] = g.FenceResource(k)
		}
		q := "INSERT INTO " + fence.Table + " (resource, token, updated_at) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, 0, UTC_TIMESTAMP(6)),", len(part)), ",")
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// printServers names the servers and shows what a round trip costs, and with
// -rtt what the delay really adds: the sleep's granularity makes it longer
// than asked.
func (s *setup) printServers(ctx context.Context, mysqlAddr, name string) error {
	ping, err := sample(200, func() error { return s.rdb.Ping(ctx).Err() })
	if err != nil {
		return err
	}
	fmt.Printf("servers: Redis %s, MySQL %s (database %s), interpolateParams=%v, Redis PING p50 %v; CPU read from pid %s (MySQL), %s (Redis)\n",
		s.cfg.redisAddr, mysqlAddr, name, s.cfg.interpolate, short(pct(ping, 50)), orNone(s.servers.mysqld), orNone(s.servers.redis))
	if s.cfg.rtt > 0 {
		sleep, _ := sample(200, func() error { time.Sleep(s.cfg.rtt); return nil })
		plain := redis.NewClient(&redis.Options{Addr: s.cfg.redisAddr})
		defer plain.Close()
		rawPing, err := sample(200, func() error { return plain.Ping(ctx).Err() })
		if err != nil {
			return err
		}
		do, err := sample(200, func() error { _, err := s.db.ExecContext(ctx, "DO 1"); return err })
		if err != nil {
			return err
		}
		rawDo, err := sample(200, func() error { _, err := s.admin.ExecContext(ctx, "DO 1"); return err })
		if err != nil {
			return err
		}
		fmt.Printf("-rtt %v: time.Sleep(%v) takes p50 %v (p99 %v); a round trip takes p50 %v more on Redis (PING %v, %v without -rtt) and %v more on MySQL (DO 1: %v, %v without)\n",
			s.cfg.rtt, s.cfg.rtt, short(pct(sleep, 50)), short(pct(sleep, 99)),
			short(pct(ping, 50)-pct(rawPing, 50)), short(pct(ping, 50)), short(pct(rawPing, 50)),
			short(pct(do, 50)-pct(rawDo, 50)), short(pct(do, 50)), short(pct(rawDo, 50)))
	}
	fmt.Println()
	return nil
}

func orNone(pid string) string {
	if pid == "" {
		return "none (no local process listens on its port)"
	}
	return pid
}

// sample times n calls of op, after a few unmeasured ones.
func sample(n int, op func() error) ([]time.Duration, error) {
	for range 10 {
		if err := op(); err != nil {
			return nil, err
		}
	}
	d := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := op(); err != nil {
			return nil, err
		}
		d = append(d, time.Since(t0))
	}
	return d, nil
}
