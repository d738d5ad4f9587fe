package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
)

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

// bareRead is bare with a read first: BEGIN; SELECT; UPDATE; COMMIT.
func bareRead(ctx context.Context, db *sqlx.DB) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var v int64
	if err := tx.GetContext(ctx, &v, "SELECT n FROM counters WHERE id = ?", 2); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = ?", v+1, 2); err != nil {
		return err
	}
	return tx.Commit()
}

// uncontended compares Do with one UPDATE against the bare transaction, and
// Do and DoRead with a read and an UPDATE against the bare transaction of
// both, one operation at a time.
func uncontended(ctx context.Context, s *setup, n int, opTimeout time.Duration) error {
	through := func(g *guard.Guard) func() error {
		return func() error {
			return bounded(ctx, opTimeout, func(ctx context.Context) error {
				return g.Do(ctx, "uncontended", func(ctx context.Context, tx *guard.Tx) error {
					_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + ? WHERE id = ?", 1, 2)
					return err
				})
			})
		}
	}
	withRead := func(read bool) func() error {
		return func() error {
			return bounded(ctx, opTimeout, func(ctx context.Context) error {
				var v int64
				update := func(ctx context.Context, tx *guard.Tx) error {
					_, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = ?", v+1, 2)
					return err
				}
				if read {
					return s.g.DoRead(ctx, "uncontended", guard.ReadOne(&v, "SELECT n FROM counters WHERE id = ?", 2), update)
				}
				return s.g.Do(ctx, "uncontended", func(ctx context.Context, tx *guard.Tx) error {
					if err := tx.GetContext(ctx, &v, "SELECT n FROM counters WHERE id = ?", 2); err != nil {
						return err
					}
					return update(ctx, tx)
				})
			})
		}
	}
	// base is the index of the variant a variant is compared with.
	variants := []struct {
		name  string
		base  int
		op    func() error
		lat   []time.Duration
		rRT   int64
		mRT   int64
		reqs  *reqLog
		steps *reqLog
	}{{name: "bare tx", op: func() error {
		return bounded(ctx, opTimeout, func(ctx context.Context) error { return bare(ctx, s.db) })
	}}, {name: "guard.Do", op: through(s.g)}, {name: "Do at-end", op: through(s.gAtEnd)}, {name: "Do ride", op: through(s.gRide)},
		{name: "bare read", op: func() error {
			return bounded(ctx, opTimeout, func(ctx context.Context) error { return bareRead(ctx, s.db) })
		}},
		{name: "Do +read", base: 4, op: withRead(false)}, {name: "DoRead", base: 4, op: withRead(true)}}
	for i := range variants { // warm up: pools, script cache
		variants[i].reqs, variants[i].steps = &reqLog{}, &reqLog{}
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
			r0, m0 := s.redis.roundTrips(), s.mysql.roundTrips()
			s.redis.timeRequests(v.reqs)
			s.mysql.timeRequests(v.reqs)
			s.stepLog.Store(v.steps)
			for range block {
				t0 := time.Now()
				if err := v.op(); err != nil {
					return err
				}
				v.lat = append(v.lat, time.Since(t0))
			}
			s.redis.timeRequests(nil)
			s.mysql.timeRequests(nil)
			s.stepLog.Store(nil)
			v.rRT += s.redis.roundTrips() - r0
			v.mRT += s.mysql.roundTrips() - m0
		}
	}
	fmt.Printf("uncontended, %d operations each (interleaved in blocks of %d), op timeout %v:\n", len(variants[0].lat), block, opTimeout)
	for _, v := range variants {
		ops := float64(len(v.lat))
		fmt.Printf("  %-9s p50 %8v  mean %8v  Redis RT/op %.2f  MySQL RT/op %.2f\n",
			v.name, short(pct(v.lat, 50)), short(mean(v.lat)), float64(v.rRT)/ops, float64(v.mRT)/ops)
	}
	for i, d := range variants {
		if i == d.base {
			continue
		}
		b := variants[d.base]
		fmt.Printf("  %s / %s: p50 %.2fx (+%v), mean %.2fx (+%v); extra round trips: Redis %+.2f, MySQL %+.2f\n",
			d.name, b.name, ratio(pct(d.lat, 50), pct(b.lat, 50)), short(pct(d.lat, 50)-pct(b.lat, 50)),
			ratio(mean(d.lat), mean(b.lat)), short(mean(d.lat)-mean(b.lat)),
			float64(d.rRT-b.rRT)/float64(len(d.lat)), float64(d.mRT-b.mRT)/float64(len(d.lat)))
	}
	fmt.Println("  time per request, from its write to the first bytes of its reply (-rtt not included), Redis and MySQL:")
	for i := range variants {
		v := &variants[i]
		fmt.Printf("    %-9s %s\n", v.name, v.reqs.summary(len(v.lat)))
	}
	if s.cfg.steps {
		fmt.Println("  stages of a Do (Hooks.OnStep; the unlock is off the caller's path):")
		for i := range variants {
			if v := &variants[i]; !v.steps.empty() {
				fmt.Printf("    %-9s %s\n", v.name, v.steps.summary(len(v.lat)))
			}
		}
	}
	fmt.Println()
	return nil
}
