package redfenceotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redfence/redfence/extra/redfenceotel"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
	"github.com/redfence/redfence/redislock"
)

func TestGuardOptionsReturnsAnInstrumentedCopy(t *testing.T) {
	retried := 0
	o := &guard.Options{MaxAttempts: 5, Hooks: guard.Hooks{OnRetry: func(string, int, error) { retried++ }}}
	got, err := redfenceotel.GuardOptions(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got == o {
		t.Fatal("GuardOptions returned its argument, not a copy")
	}
	if o.Hooks.OnDo != nil || o.Hooks.OnStep != nil || o.Hooks.OnDone != nil {
		t.Error("GuardOptions changed the Options it was given")
	}
	if got.MaxAttempts != 5 {
		t.Errorf("copy has MaxAttempts %d, want 5", got.MaxAttempts)
	}
	if got.Hooks.OnDo == nil || got.Hooks.OnStep == nil || got.Hooks.OnDone == nil {
		t.Error("copy lacks the tracing hooks")
	}
	got.Hooks.OnRetry("k", 1, nil)
	if retried != 1 {
		t.Errorf("the Options' own OnRetry ran %d times through the copy, want 1", retried)
	}

	if got, err := redfenceotel.GuardOptions(nil, nil); err != nil || got == nil || got.Hooks.OnDone == nil {
		t.Errorf("GuardOptions(nil) = %v, %v; want instrumented defaults", got, err)
	}
}

// Every way of building an instrumented Guard, and each signal switched off
// on its own: one committed Do, then count what was recorded.
func TestTracesAndMetricsSwitchedSeparately(t *testing.T) {
	type build func(l *redislock.Locker, db *sqlx.DB, opt *redfenceotel.Options) *guard.Guard
	viaNewGuard := func(t *testing.T) build {
		return func(l *redislock.Locker, db *sqlx.DB, opt *redfenceotel.Options) *guard.Guard {
			g, err := redfenceotel.NewGuard(l, db, nil, opt)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
	}
	viaGuardOptions := func(t *testing.T) build {
		return func(l *redislock.Locker, db *sqlx.DB, opt *redfenceotel.Options) *guard.Guard {
			o, err := redfenceotel.GuardOptions(&guard.Options{}, opt)
			if err != nil {
				t.Fatal(err)
			}
			return guard.New(l, db, o)
		}
	}
	viaInstrument := func(t *testing.T) build {
		return func(l *redislock.Locker, db *sqlx.DB, opt *redfenceotel.Options) *guard.Guard {
			o := &guard.Options{}
			if err := redfenceotel.Instrument(o, opt); err != nil {
				t.Fatal(err)
			}
			return guard.New(l, db, o)
		}
	}
	for _, tc := range []struct {
		name             string
		build            func(*testing.T) build
		noTrace, noMeter bool
		wantSpans        bool
		wantMetrics      bool
	}{
		{name: "NewGuard", build: viaNewGuard, wantSpans: true, wantMetrics: true},
		{name: "GuardOptions", build: viaGuardOptions, wantSpans: true, wantMetrics: true},
		{name: "Instrument before guard.New", build: viaInstrument, wantSpans: true, wantMetrics: true},
		{name: "tracing only", build: viaNewGuard, noMeter: true, wantSpans: true},
		{name: "metrics only", build: viaNewGuard, noTrace: true, wantMetrics: true},
		{name: "neither", build: viaGuardOptions, noTrace: true, noMeter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, points := recordOneDo(t, tc.build(t), tc.noTrace, tc.noMeter)
			if (spans > 0) != tc.wantSpans {
				t.Errorf("%d spans recorded, want spans: %v", spans, tc.wantSpans)
			}
			if (points > 0) != tc.wantMetrics {
				t.Errorf("%d metric data points recorded, want metrics: %v", points, tc.wantMetrics)
			}
		})
	}
}

// recordOneDo runs one committed Do on a Guard made by build and returns the
// number of spans and metric data points recorded.
func recordOneDo(t *testing.T, build func(*redislock.Locker, *sqlx.DB, *redfenceotel.Options) *guard.Guard,
	noTrace, noMeter bool) (spans, points int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })

	db := testenv.MySQL(t)
	if err := migrations.Apply(ctx, db.DB); err != nil {
		t.Fatal(err)
	}
	locker := redislock.New(testenv.Redis(t), &redislock.Options{Prefix: testenv.Prefix(t)})
	t.Cleanup(func() { _ = locker.Close() })

	g := build(locker, db, &redfenceotel.Options{TracerProvider: tp, MeterProvider: mp,
		DisableTracing: noTrace, DisableMetrics: noMeter})
	if err := g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points += len(d.DataPoints)
			case metricdata.Histogram[float64]:
				points += len(d.DataPoints)
			}
		}
	}
	return len(exp.GetSpans()), points
}
