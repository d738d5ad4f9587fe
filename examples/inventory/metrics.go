package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redfence/redfence/guard"
)

// metrics counts what a Guard's Do calls did, through guard.Hooks, and
// writes it in Prometheus's text exposition format for GET /metrics. The
// example writes the format itself, a few dozen lines, rather than pull a
// metrics client into redfence's module; extra/redfenceotel is the
// instrumentation for real services.
//
// Its metric names are extra/redfenceotel's, as OpenTelemetry's Prometheus
// exporter writes them (redfence.do.calls is redfence_do_calls_total), so
// that one dashboard serves both.
type metrics struct {
	mu       sync.Mutex
	calls    map[callLabels]uint64
	retries  uint64
	wait     histogram // lock waits that ended with the key held
	hold     histogram // from the grant to the end of Do
	duration histogram // whole Do calls
	held     int64     // keys held now
	fallback int64     // 1 while the Guard runs in database mode
}

// callLabels are the labels of redfence_do_calls_total: the Do's mode and
// its guard.OutcomeLabel.
type callLabels struct {
	mode    guard.Mode
	outcome string
}

// The modes exposed, each with every outcome from the start at 0, so that a
// rate over a counter that has not moved yet is 0 rather than absent.
var allGuardModes = []guard.Mode{guard.ModeRedis, guard.ModeDatabase}

// durationBuckets are the upper bounds, in seconds, of the wait and hold
// histograms: from a hand-off on a quiet key to a queue seconds long.
var durationBuckets = []float64{0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10}

func newMetrics() *metrics {
	return &metrics{calls: map[callLabels]uint64{},
		wait: newHistogram(durationBuckets), hold: newHistogram(durationBuckets), duration: newHistogram(durationBuckets)}
}

// doState is what metrics remember of one Do between its hooks, which all
// run on the Do's goroutine.
type doState struct {
	granted time.Time // zero until the key is held
	fnErr   error     // what fn returned on its last attempt, for guard.OutcomeLabel
}

type doStateKey struct{}

// hooks returns the hooks that feed m.
func (m *metrics) hooks() guard.Hooks {
	return guard.Hooks{
		OnDo: func(ctx context.Context, _ string) context.Context {
			return context.WithValue(ctx, doStateKey{}, &doState{})
		},
		OnStep: func(ctx context.Context, s guard.Step) {
			st, _ := ctx.Value(doStateKey{}).(*doState)
			if st == nil {
				return
			}
			switch {
			case s.Kind == guard.StepFn:
				st.fnErr = s.Err
			case s.Kind == guard.StepLock && s.Err == nil:
				st.granted = s.Start.Add(s.Duration)
				m.mu.Lock()
				m.wait.observe(s.Duration.Seconds())
				m.held++
				m.mu.Unlock()
			case s.Kind == guard.StepClaim && s.Attempt > 1:
				m.mu.Lock()
				m.retries++
				m.mu.Unlock()
			}
		},
		// The hold is counted from the grant to the end of Do (which follows
		// the unlock step at once, in both modes), once per call that got
		// the key, whatever happened in between.
		OnDone: func(ctx context.Context, r guard.Result) {
			st, _ := ctx.Value(doStateKey{}).(*doState)
			if st == nil {
				st = &doState{}
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			m.calls[callLabels{r.Mode, guard.OutcomeLabel(r, st.fnErr)}]++
			m.duration.observe(r.Duration.Seconds())
			if !st.granted.IsZero() {
				m.hold.observe(r.Start.Add(r.Duration).Sub(st.granted).Seconds())
				m.held--
			}
		},
		OnModeChange: func(_, to guard.Mode) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.fallback = 0
			if to == guard.ModeDatabase {
				m.fallback = 1
			}
		},
	}
}

// ServeHTTP writes the metrics in the text exposition format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = m.write(w)
}

// write writes every metric family to w.
func (m *metrics) write(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &expo{w: w}
	e.family("redfence_do_calls_total", "counter", "guard.Do calls by how they ended (outcome: guard.OutcomeLabel; fn_error is fn's own error, "+
		"such as sold out, and failed a failure of the lock, the database or guard) and how the key was held (mode: redis, or database while Redis is unavailable).")
	for _, mode := range allGuardModes {
		for _, o := range guard.OutcomeLabels() {
			e.sample("redfence_do_calls_total", fmt.Sprintf(`mode=%q,outcome=%q`, mode.String(), o), float64(m.calls[callLabels{mode, o}]))
		}
	}
	e.family("redfence_do_retries_total", "counter", "Transaction attempts run again after a deadlock, lock wait timeout or lost connection.")
	e.sample("redfence_do_retries_total", "", float64(m.retries))
	e.histogram("redfence_lock_wait_seconds", "Time from the start of guard.Do until the key was held, of the calls that got it.", &m.wait)
	e.histogram("redfence_lock_hold_seconds", "Time from the grant until guard.Do returned.", &m.hold)
	e.histogram("redfence_do_duration_seconds", "Duration of guard.Do calls.", &m.duration)
	e.family("redfence_locks_held", "gauge", "Keys held by guard.Do calls now.")
	e.sample("redfence_locks_held", "", float64(m.held))
	e.family("redfence_fallback_active", "gauge", "1 while the Guard runs in database mode because Redis is unavailable (guard.Options.Outage.Fallback), else 0.")
	e.sample("redfence_fallback_active", "", float64(m.fallback))
	return e.err
}

// histogram counts observations into fixed buckets, as Prometheus exposes
// them: cumulative counts per upper bound, a sum and a count.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is above every bound
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
}

// expo writes the text exposition format, keeping the first write error.
type expo struct {
	w   io.Writer
	err error
}

func (e *expo) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

func (e *expo) family(name, typ, help string) {
	e.printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (e *expo) sample(name, labels string, v float64) {
	if labels != "" {
		name += "{" + labels + "}"
	}
	e.printf("%s %s\n", name, formatValue(v))
}

func (e *expo) histogram(name, help string, h *histogram) {
	e.family(name, "histogram", help)
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		e.sample(name+"_bucket", `le="`+formatValue(b)+`"`, float64(cum))
	}
	cum += h.counts[len(h.bounds)]
	e.sample(name+"_bucket", `le="+Inf"`, float64(cum))
	e.sample(name+"_sum", "", h.sum)
	e.sample(name+"_count", "", float64(cum))
}

// formatValue writes v as the format wants it: the shortest decimal that
// reads back as v, with no exponent for counts.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
