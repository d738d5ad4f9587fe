package main

import (
	"math"
	"runtime/metrics"
	"time"
)

// sched is what the Go scheduler of this process did: goroutines created,
// and how long goroutines waited runnable before they ran (a histogram of
// the runtime's /sched/latencies), the cost of every hop from one goroutine
// to another or from the network back to a goroutine.
type sched struct {
	created uint64
	counts  []uint64
	buckets []float64 // bucket boundaries in seconds, len(counts)+1
}

var schedMetrics = []string{"/sched/goroutines-created:goroutines", "/sched/latencies:seconds"}

// readSched samples the scheduler's counters.
func readSched() sched {
	s := make([]metrics.Sample, len(schedMetrics))
	for i, n := range schedMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	var out sched
	if s[0].Value.Kind() == metrics.KindUint64 {
		out.created = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64Histogram {
		h := s[1].Value.Float64Histogram()
		out.counts = append([]uint64(nil), h.Counts...)
		out.buckets = h.Buckets
	}
	return out
}

// sub is the activity between b and a (a later).
func (a sched) sub(b sched) sched {
	d := sched{created: a.created - b.created, buckets: a.buckets, counts: make([]uint64, len(a.counts))}
	for i := range a.counts {
		d.counts[i] = a.counts[i]
		if i < len(b.counts) {
			d.counts[i] -= b.counts[i]
		}
	}
	return d
}

// add sums the activity of two periods.
func (a sched) add(b sched) sched {
	if a.counts == nil {
		return b
	}
	d := sched{created: a.created + b.created, buckets: a.buckets, counts: append([]uint64(nil), a.counts...)}
	for i := range d.counts {
		if i < len(b.counts) {
			d.counts[i] += b.counts[i]
		}
	}
	return d
}

// waits is the number of scheduling waits recorded.
func (a sched) waits() uint64 {
	var n uint64
	for _, c := range a.counts {
		n += c
	}
	return n
}

// latency returns the p-th percentile of the waits, as the upper bound of
// its histogram bucket.
func (a sched) latency(p float64) time.Duration {
	n := a.waits()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p / 100 * float64(n)))
	var seen uint64
	for i, c := range a.counts {
		seen += c
		if seen >= rank {
			hi := a.buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = a.buckets[i]
			}
			return time.Duration(hi * float64(time.Second))
		}
	}
	return 0
}
