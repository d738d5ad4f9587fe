package main

import (
	"math"
	"testing"
	"time"
)

func TestSchedLatencyPercentiles(t *testing.T) {
	// Buckets [0,1µs) [1µs,10µs) [10µs,100µs) [100µs,+Inf).
	b := []float64{0, 1e-6, 1e-5, 1e-4, math.Inf(1)}
	before := sched{created: 10, counts: []uint64{5, 5, 0, 0}, buckets: b}
	after := sched{created: 25, counts: []uint64{5, 95, 8, 2}, buckets: b}
	d := after.sub(before)
	if d.created != 15 || d.waits() != 100 {
		t.Fatalf("delta: %d created, %d waits; want 15 and 100", d.created, d.waits())
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 10 * time.Microsecond}, {90, 10 * time.Microsecond}, {95, 100 * time.Microsecond}, {99, 100 * time.Microsecond}, {100, 100 * time.Microsecond}} {
		if got := d.latency(c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	sum := d.add(d)
	if sum.created != 30 || sum.waits() != 200 || sum.latency(50) != 10*time.Microsecond {
		t.Fatalf("sum of two periods: %d created, %d waits, p50 %v", sum.created, sum.waits(), sum.latency(50))
	}
	if (sched{}).latency(50) != 0 {
		t.Fatal("no waits: latency not 0")
	}
	// The process's own counters read and move.
	s0 := readSched()
	done := make(chan struct{})
	go func() { close(done) }()
	<-done
	if s1 := readSched(); s1.created <= s0.created || len(s1.counts) == 0 {
		t.Fatalf("readSched: created %d -> %d, %d buckets", s0.created, s1.created, len(s1.counts))
	}
}
