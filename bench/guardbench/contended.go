package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redfence/redfence/guard"
)

// contention is one contended mode: hot callers on one key beside cold
// callers on random rows of the cold table, all sharing one DB pool.
type contention struct {
	mode      string // hot or mixed
	hot, cold int
	opTimeout time.Duration
}

// variant is one way to run the read-modify-write: row 0 is the hot key,
// other rows are cold.
type variant struct {
	short, name string
	op          func(ctx context.Context, row int) error
}

// txn is what readModifyWrite needs of a transaction: a *sqlx.Tx, or a
// *guard.Tx (whose own methods a claim can ride with).
type txn interface {
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// readModifyWrite is the critical section: read a counter, write it back
// plus one. lock is appended to the SELECT.
func readModifyWrite(ctx context.Context, tx txn, row int, lock string) error {
	table, id := "counters", 1
	if row > 0 {
		table, id = "cold", row
	}
	var v int64
	if err := tx.GetContext(ctx, &v, "SELECT n FROM "+table+" WHERE id = ?"+lock, id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET n = ? WHERE id = ?", v+1, id)
	return err
}

func (s *setup) variants() []variant {
	forUpdate := func(ctx context.Context, row int) error {
		tx, err := s.db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := readModifyWrite(ctx, tx, row, " FOR UPDATE"); err != nil {
			return err
		}
		return tx.Commit()
	}
	through := func(g *guard.Guard) func(ctx context.Context, row int) error {
		return func(ctx context.Context, row int) error {
			key := "hot"
			if row > 0 {
				key = "cold:" + strconv.Itoa(row)
			}
			return g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
				return readModifyWrite(ctx, tx.Tx, row, "")
			})
		}
	}
	rides := func(ctx context.Context, row int) error {
		key := "hot"
		if row > 0 {
			key = "cold:" + strconv.Itoa(row)
		}
		return s.gRide.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			return readModifyWrite(ctx, tx, row, "")
		})
	}
	// reads: the read goes with the claim (DoRead), the write as do's.
	reads := func(ctx context.Context, row int) error {
		key, table, id := "hot", "counters", 1
		if row > 0 {
			key, table, id = "cold:"+strconv.Itoa(row), "cold", row
		}
		var v int64
		return s.g.DoRead(ctx, key, guard.ReadOne(&v, "SELECT n FROM "+table+" WHERE id = ?", id), func(ctx context.Context, tx *guard.Tx) error {
			_, err := tx.Tx.ExecContext(ctx, "UPDATE "+table+" SET n = ? WHERE id = ?", v+1, id)
			return err
		})
	}
	vs := []variant{{"sql", "FOR UPDATE", forUpdate}}
	for _, v := range []variant{{"do", "guard.Do", through(s.g)}, {"atend", "Do at-end", through(s.gAtEnd)},
		{"handoff", "Do handoff", through(s.gHandOff)}, {"relay", "Do relay", through(s.gRelay)},
		{"batch", "Do batch", through(s.gBatch)}, {"batchsp", "Do batch+savepoints", through(s.gBatchSP)},
		{"batchatend", "Do batch at-end", through(s.gBatchAtEnd)}, {"ride", "Do ride", rides},
		{"read", "DoRead", reads}} {
		batch := strings.HasPrefix(v.short, "batch")
		if (s.cfg.variants == "" && !batch) || slices.Contains(strings.Split(s.cfg.variants, ","), v.short) {
			vs = append(vs, v)
		}
	}
	return vs
}

// classResult is one class's share of a variant's runs.
type classResult struct {
	done int // operations that ended within the runs' length
	lat  []time.Duration
	errs int
}

// result is one variant's runs, summed.
type result struct {
	cls              [nClasses]classResult
	elapsed          time.Duration // the runs' length, summed
	ops              int           // every operation that succeeded, also while the callers stopped
	inTx             txCount       // the most connections in a transaction at once
	active           txCount       // the most of them whose COMMIT or ROLLBACK was not sent yet
	redisRT, mysqlRT int64
	cpu              cpuTimes
	sched            sched
	firstErr         error
}

func (r *result) rps(c class) float64 { return float64(r.cls[c].done) / r.elapsed.Seconds() }

func (r *result) totalRPS() float64 { return r.rps(hot) + r.rps(cold) }

func (s *setup) contended(ctx context.Context, c contention) error {
	cfg := s.cfg
	s.db.SetMaxOpenConns(cfg.pool)
	s.db.SetMaxIdleConns(cfg.pool)
	variants := s.variants()
	fmt.Printf("%s: %d callers on one hot key", c.mode, c.hot)
	if c.cold > 0 {
		fmt.Printf(" + %d callers on random rows of %d (one key each)", c.cold, cfg.coldRows)
	}
	fmt.Printf(", DB pool %d, %d runs of %v per variant, op timeout %v, -rtt %v, guard MaxBatch %d;\n  critical section: SELECT n; UPDATE n = n+1 (FOR UPDATE: in a transaction with SELECT ... FOR UPDATE; guard.Do: in Do on the row's key)\n",
		cfg.pool, cfg.rounds, cfg.dur, c.opTimeout, cfg.rtt, cfg.maxBatch)

	warm := min(cfg.dur/5, time.Second)
	for _, v := range variants {
		if err := s.runOnce(ctx, c, v, warm, &result{}); err != nil {
			return err
		}
	}
	profile := s.cfg.profile != nil && !s.profiled &&
		(c.mode == "hot" || !slices.Contains(cfg.modes, "hot"))
	results := make([]result, len(variants))
	for round := range cfg.rounds {
		for i, v := range variants {
			prof := profile && v.short == cfg.profileVariant && round == cfg.rounds-1
			if prof {
				if err := pprof.StartCPUProfile(s.cfg.profile); err != nil {
					return err
				}
				s.profiled = true
			}
			err := s.runOnce(ctx, c, v, cfg.dur, &results[i])
			if prof {
				pprof.StopCPUProfile()
			}
			if err != nil {
				return err
			}
		}
	}
	s.report(c, variants, results)
	return nil
}

// runOnce runs c's callers through v for d and adds the outcome to r.
func (s *setup) runOnce(ctx context.Context, c contention, v variant, d time.Duration, r *result) error {
	hot0, cold0, err := s.counts(ctx)
	if err != nil {
		return err
	}
	s.tally.resetPeaks()
	stop := make(chan struct{})

	var (
		mu       sync.Mutex
		lat      [nClasses][]time.Duration
		ok       [nClasses]int
		done     [nClasses]int
		errs     [nClasses]int
		firstErr error
		wg       sync.WaitGroup
	)
	r0, m0 := s.redis.roundTrips(), s.mysql.roundTrips()
	cpu0 := readCPU(s.servers)
	sched0 := readSched()
	start := time.Now()
	end := start.Add(d)
	for i := range c.hot + c.cold {
		cl := hot
		if i >= c.hot {
			cl = cold
		}
		wg.Go(func() {
			cctx := withClass(ctx, cl)
			var mine []time.Duration
			var inTime, failed int
			var ferr error
			for {
				select {
				case <-stop:
					mu.Lock()
					lat[cl] = append(lat[cl], mine...)
					ok[cl] += len(mine)
					done[cl] += inTime
					errs[cl] += failed
					if firstErr == nil {
						firstErr = ferr
					}
					mu.Unlock()
					return
				default:
				}
				row := 0
				if cl == cold {
					row = 1 + rand.IntN(s.cfg.coldRows)
				}
				t0 := time.Now()
				if err := bounded(cctx, c.opTimeout, func(ctx context.Context) error { return v.op(ctx, row) }); err != nil {
					failed++
					if ferr == nil {
						ferr = fmt.Errorf("%s, %s caller: %w", v.name, cl, err)
					}
					continue
				}
				t1 := time.Now()
				mine = append(mine, t1.Sub(t0))
				if !t1.After(end) {
					inTime++
				}
			}
		})
	}
	time.Sleep(time.Until(end))
	close(stop)
	wg.Wait()
	cpu := readCPU(s.servers).sub(cpu0)
	sch := readSched().sub(sched0)
	r1, m1 := s.redis.roundTrips(), s.mysql.roundTrips()

	hot1, cold1, err := s.counts(ctx)
	if err != nil {
		return err
	}
	if hot1-hot0 != int64(ok[hot]) || cold1-cold0 != int64(ok[cold]) {
		return fmt.Errorf("%s: %d hot and %d cold operations succeeded but the counters moved by %d and %d",
			v.name, ok[hot], ok[cold], hot1-hot0, cold1-cold0)
	}
	for cl := range nClasses {
		r.cls[cl].done += done[cl]
		r.cls[cl].lat = append(r.cls[cl].lat, lat[cl]...)
		r.cls[cl].errs += errs[cl]
	}
	r.elapsed += d
	r.ops += ok[hot] + ok[cold]
	open, active := s.tally.peaks()
	r.inTx.raise(open)
	r.active.raise(active)
	r.redisRT += r1 - r0
	r.mysqlRT += m1 - m0
	r.cpu = r.cpu.add(cpu)
	r.sched = r.sched.add(sch)
	if r.firstErr == nil {
		r.firstErr = firstErr
	}
	return nil
}

// counts reads the hot counter and the sum of the cold ones.
func (s *setup) counts(ctx context.Context) (hotN, coldN int64, err error) {
	err = s.admin.QueryRowContext(ctx, "SELECT (SELECT n FROM counters WHERE id = 1), (SELECT COALESCE(SUM(n), 0) FROM cold)").Scan(&hotN, &coldN)
	return hotN, coldN, err
}

func (s *setup) report(c contention, variants []variant, results []result) {
	classes := []class{hot, cold}
	if c.cold == 0 {
		classes = classes[:1]
	} else if c.hot == 0 {
		classes = classes[1:]
	}
	for i, v := range variants {
		r := &results[i]
		for j, cl := range classes {
			name := ""
			if j == 0 {
				name = v.name
			}
			cr := r.cls[cl]
			fmt.Printf("  %-10s %-4s %7.0f ops/s  p50 %7v  p99 %7v  max %7v  errors %d\n",
				name, cl, r.rps(cl), short(pct(cr.lat, 50)), short(pct(cr.lat, 99)), short(pct(cr.lat, 100)), cr.errs)
		}
		if len(classes) > 1 {
			fmt.Printf("  %-10s %-4s %7.0f ops/s\n", "", "all", r.totalRPS())
		}
		fmt.Printf("  %-10s DB conns in use at once, at most: %d; by hot callers %d, by cold callers %d; before their COMMIT or ROLLBACK: %d; %d, %d\n",
			"", r.inTx.all, r.inTx.by[hot], r.inTx.by[cold], r.active.all, r.active.by[hot], r.active.by[cold])
		fmt.Printf("  %-10s per op: round trips Redis %.2f, MySQL %.2f; CPU µs bench %.0f, mysqld %.0f, redis %.0f (machine idle %.0f%%)\n",
			"", float64(r.redisRT)/float64(max(r.ops, 1)), float64(r.mysqlRT)/float64(max(r.ops, 1)),
			r.cpu.self.perOp(r.ops), r.cpu.mysqld.perOp(r.ops), r.cpu.redis.perOp(r.ops), r.cpu.idlePct())
		fmt.Printf("  %-10s scheduler of this process, per op: %.1f goroutines created, %.1f waits to run; wait p50 %v, p90 %v, p99 %v\n",
			"", float64(r.sched.created)/float64(max(r.ops, 1)), float64(r.sched.waits())/float64(max(r.ops, 1)),
			short(r.sched.latency(50)), short(r.sched.latency(90)), short(r.sched.latency(99)))
		if r.firstErr != nil {
			fmt.Printf("  %-10s first error: %v\n", "", r.firstErr)
		}
	}
	fmt.Printf("  (ops/s: operations ended within the runs over their length; latencies pooled over %d runs; per op: over every operation, also those ending while callers stopped)\n", s.cfg.rounds)
	if len(variants) < 2 {
		return
	}
	m := &results[0]
	for i := 1; i < len(variants); i++ {
		d := &results[i]
		var parts []string
		for _, cl := range classes {
			parts = append(parts, fmt.Sprintf("%s %.2fx", cl, d.rps(cl)/m.rps(cl)))
		}
		if len(classes) > 1 {
			parts = append(parts, fmt.Sprintf("total %.2fx", d.totalRPS()/m.totalRPS()))
		}
		p99 := ""
		if c.hot > 0 {
			p99 = fmt.Sprintf("; hot p99 %.2fx", ratio(pct(d.cls[hot].lat, 99), pct(m.cls[hot].lat, 99)))
		}
		fmt.Printf("summary %s, %s / SELECT ... FOR UPDATE: throughput %s%s\n", c.mode, variants[i].name, strings.Join(parts, ", "), p99)
	}
	fmt.Println()
}
