package redfenceotel

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/redfence/redfence/guard"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/redfence/redfence/extra/redfenceotel"

// Attribute keys.
const (
	KeyAttr      = attribute.Key("redfence.key")
	TokenAttr    = attribute.Key("redfence.token")
	AttemptAttr  = attribute.Key("redfence.attempt")
	AttemptsAttr = attribute.Key("redfence.attempts")
	OutcomeAttr  = attribute.Key("redfence.outcome")
	AcquiredAttr = attribute.Key("redfence.acquired")
	ModeAttr     = attribute.Key("redfence.mode")
)

// Options configure [NewGuard], [GuardOptions] and [Hooks]. A nil *Options
// gives the defaults: traces and metrics, from the global providers.
type Options struct {
	// TracerProvider creates the tracer.
	// default: otel.GetTracerProvider()
	TracerProvider trace.TracerProvider

	// MeterProvider creates the meter.
	// default: otel.GetMeterProvider()
	MeterProvider metric.MeterProvider

	// MetricKey, when set, maps a key to the value of a redfence.key
	// attribute on metrics ("" leaves it out). Keep its range small: every
	// distinct value is a time series.
	// default: nil (no key on metrics)
	MetricKey func(key string) string

	// DisableTracing leaves spans out: only metrics are recorded.
	// default: false (spans recorded)
	DisableTracing bool

	// DisableMetrics leaves metrics out: only spans are recorded.
	// default: false (metrics recorded)
	DisableMetrics bool
}

type instruments struct {
	tracer    trace.Tracer
	metricKey func(string) string
	wait      metric.Float64Histogram
	hold      metric.Float64Histogram
	duration  metric.Float64Histogram
	outcomes  metric.Int64Counter
	retries   metric.Int64Counter
	held      metric.Int64UpDownCounter
	fallback  metric.Int64UpDownCounter
}

// Hooks returns guard.Hooks that record traces and metrics of every Do, for
// a caller that assembles guard.Options.Hooks itself. [NewGuard] and
// [GuardOptions] add them to hooks the Options already have.
func Hooks(opt *Options) (guard.Hooks, error) {
	in, err := newInstruments(opt)
	if err != nil {
		return guard.Hooks{}, err
	}
	return in.hooks(), nil
}

func newInstruments(opt *Options) (*instruments, error) {
	var o Options
	if opt != nil {
		o = *opt
	}
	// A switched-off signal goes to a no-op provider, so that the hooks
	// below need no case for it.
	switch {
	case o.DisableTracing:
		o.TracerProvider = tracenoop.NewTracerProvider()
	case o.TracerProvider == nil:
		o.TracerProvider = otel.GetTracerProvider()
	}
	switch {
	case o.DisableMetrics:
		o.MeterProvider = metricnoop.NewMeterProvider()
	case o.MeterProvider == nil:
		o.MeterProvider = otel.GetMeterProvider()
	}
	m := o.MeterProvider.Meter(ScopeName)
	in := &instruments{tracer: o.TracerProvider.Tracer(ScopeName), metricKey: o.MetricKey}
	var err error
	seconds := metric.WithUnit("s")
	buckets := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
	if in.wait, err = m.Float64Histogram("redfence.lock.wait", seconds, buckets,
		metric.WithDescription("Time spent queued for the lock")); err != nil {
		return nil, err
	}
	if in.hold, err = m.Float64Histogram("redfence.lock.hold", seconds, buckets,
		metric.WithDescription("Time from the lock's grant to its release")); err != nil {
		return nil, err
	}
	if in.duration, err = m.Float64Histogram("redfence.do.duration", seconds, buckets,
		metric.WithDescription("Duration of guard.Do calls")); err != nil {
		return nil, err
	}
	if in.outcomes, err = m.Int64Counter("redfence.do.calls",
		metric.WithDescription("guard.Do calls by outcome (guard.OutcomeLabel: fn_error is fn's own error, failed a failure of the lock, the database or guard) and mode")); err != nil {
		return nil, err
	}
	if in.retries, err = m.Int64Counter("redfence.do.retries",
		metric.WithDescription("Transactions run again after a deadlock, lock wait timeout or lost connection")); err != nil {
		return nil, err
	}
	if in.held, err = m.Int64UpDownCounter("redfence.locks.held",
		metric.WithDescription("Locks held by guard.Do in this process now")); err != nil {
		return nil, err
	}
	if in.fallback, err = m.Int64UpDownCounter("redfence.fallback.active",
		metric.WithDescription("Guards in database mode now (guard.Options.Outage.Fallback): 1 while Redis is unavailable")); err != nil {
		return nil, err
	}
	return in, nil
}

func (in *instruments) attrs(key string, more ...attribute.KeyValue) metric.MeasurementOption {
	if in.metricKey != nil {
		if v := in.metricKey(key); v != "" {
			more = append(more, KeyAttr.String(v))
		}
	}
	return metric.WithAttributes(more...)
}

func (in *instruments) hooks() guard.Hooks {
	return guard.Hooks{
		OnModeChange: func(from, to guard.Mode) {
			switch {
			case to == guard.ModeDatabase && from != to:
				in.fallback.Add(context.Background(), 1)
			case to == guard.ModeRedis && from != to:
				in.fallback.Add(context.Background(), -1)
			}
		},
		OnDo: func(ctx context.Context, key string) context.Context {
			ctx, _ = in.tracer.Start(ctx, "redfence.Do", trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithAttributes(KeyAttr.String(key)))
			return context.WithValue(ctx, fnErrKey{}, new(error))
		},
		OnStep: func(ctx context.Context, s guard.Step) {
			end := s.Start.Add(s.Duration)
			attrs := []attribute.KeyValue{KeyAttr.String(s.Key)}
			if s.Token != 0 {
				attrs = append(attrs, TokenAttr.Int64(int64(s.Token)))
			}
			if s.Attempt != 0 {
				attrs = append(attrs, AttemptAttr.Int(s.Attempt))
			}
			_, span := in.tracer.Start(ctx, "redfence."+s.Kind.String(), trace.WithTimestamp(s.Start), trace.WithAttributes(attrs...))
			if s.Err != nil {
				span.RecordError(s.Err, trace.WithTimestamp(end))
				span.SetStatus(codes.Error, s.Err.Error())
			}
			span.End(trace.WithTimestamp(end))

			switch s.Kind {
			case guard.StepFn:
				if p, _ := ctx.Value(fnErrKey{}).(*error); p != nil {
					*p = s.Err
				}
			case guard.StepLock:
				in.wait.Record(ctx, s.Duration.Seconds(), in.attrs(s.Key, AcquiredAttr.Bool(s.Err == nil)))
				if s.Err == nil {
					in.held.Add(ctx, 1, in.attrs(s.Key))
				}
			case guard.StepUnlock:
				in.held.Add(ctx, -1, in.attrs(s.Key))
			case guard.StepClaim:
				if s.Attempt > 1 {
					in.retries.Add(ctx, 1, in.attrs(s.Key))
				}
			}
		},
		OnDone: func(ctx context.Context, r guard.Result) {
			var fnErr error
			if p, _ := ctx.Value(fnErrKey{}).(*error); p != nil {
				fnErr = *p
			}
			outcome := OutcomeAttr.String(guard.OutcomeLabel(r, fnErr))
			in.outcomes.Add(ctx, 1, in.attrs(r.Key, outcome, ModeAttr.String(r.Mode.String())))
			in.duration.Record(ctx, r.Duration.Seconds(), in.attrs(r.Key, outcome))
			if r.Held > 0 {
				in.hold.Record(ctx, r.Held.Seconds(), in.attrs(r.Key))
			}
			span := trace.SpanFromContext(ctx)
			span.SetAttributes(outcome, AttemptsAttr.Int(r.Attempts), ModeAttr.String(r.Mode.String()))
			if r.Token != 0 {
				span.SetAttributes(TokenAttr.Int64(int64(r.Token)))
			}
			if r.Err != nil {
				span.RecordError(r.Err)
				span.SetStatus(codes.Error, outcome.Value.AsString())
			}
			span.End(trace.WithTimestamp(r.Start.Add(r.Duration)))
		},
	}
}

// fnErrKey holds, in a Do's ctx, what fn returned on its last attempt, for
// guard.OutcomeLabel.
type fnErrKey struct{}

// chain returns hooks that call a's hooks, then b's.
func chain(a, b guard.Hooks) guard.Hooks {
	return guard.Hooks{
		OnAcquired:   both3(a.OnAcquired, b.OnAcquired),
		OnFenced:     both3(a.OnFenced, b.OnFenced),
		OnLost:       both2(a.OnLost, b.OnLost),
		OnRetry:      both3(a.OnRetry, b.OnRetry),
		OnCommitted:  both3(a.OnCommitted, b.OnCommitted),
		OnModeChange: both2(a.OnModeChange, b.OnModeChange),
		OnDo:         chainDo(a.OnDo, b.OnDo),
		OnStep:       both2(a.OnStep, b.OnStep),
		OnDone:       both2(a.OnDone, b.OnDone),
	}
}

func chainDo(f, g func(context.Context, string) context.Context) func(context.Context, string) context.Context {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(ctx context.Context, key string) context.Context {
		if c := f(ctx, key); c != nil {
			ctx = c
		}
		return g(ctx, key)
	}
}

func both2[A, B any](f, g func(A, B)) func(A, B) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(a A, b B) { f(a, b); g(a, b) }
}

func both3[A, B, C any](f, g func(A, B, C)) func(A, B, C) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(a A, b B, c C) { f(a, b, c); g(a, b, c) }
}
