package redfenceotel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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

var errBoom = errors.New("boom")

func TestSpansAndMetricsOfDo(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx := context.Background()
	t.Cleanup(func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) })

	db := testenv.MySQL(t)
	if err := migrations.Apply(ctx, db.DB); err != nil {
		t.Fatal(err)
	}
	testenv.MustExec(t, db, "CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL)")
	testenv.MustExec(t, db, "INSERT INTO counters VALUES (1, 0)")
	locker := redislock.New(testenv.Redis(t), &redislock.Options{Prefix: testenv.Prefix(t)})
	t.Cleanup(func() { _ = locker.Close() })

	retried := 0
	opt := &guard.Options{Hooks: guard.Hooks{OnRetry: func(string, int, error) { retried++ }}}
	g, err := redfenceotel.NewGuard(locker, db, opt, &redfenceotel.Options{TracerProvider: tp, MeterProvider: mp,
		MetricKey: func(key string) string { return "sku" }})
	if err != nil {
		t.Fatal(err)
	}

	err = g.Do(ctx, "sku:1", func(ctx context.Context, tx *guard.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, "sku:1", func(context.Context, *guard.Tx) error { return errBoom }); !errors.Is(err, errBoom) {
		t.Fatalf("Do = %v", err)
	}
	if retried != 0 {
		t.Fatalf("existing OnRetry hook called %d times", retried)
	}

	// Traces: two Do spans, each the parent of its steps.
	got := spans.GetSpans()
	var dos []tracetest.SpanStub
	children := map[string][]string{}
	for _, s := range got {
		if s.Name == "redfence.Do" {
			dos = append(dos, s)
			continue
		}
		children[s.Parent.SpanID().String()] = append(children[s.Parent.SpanID().String()], s.Name)
	}
	if len(dos) != 2 {
		t.Fatalf("%d redfence.Do spans, want 2 (spans: %d)", len(dos), len(got))
	}
	want := []string{"redfence.lock", "redfence.claim", "redfence.fn", "redfence.commit", "redfence.unlock"}
	if c := children[dos[0].SpanContext.SpanID().String()]; !equal(c, want) {
		t.Errorf("children of the committed Do: %v, want %v", c, want)
	}
	if c := children[dos[1].SpanContext.SpanID().String()]; !equal(c, []string{"redfence.lock", "redfence.claim", "redfence.fn", "redfence.unlock"}) {
		t.Errorf("children of the failed Do: %v", c)
	}
	if v := attr(dos[0].Attributes, redfenceotel.OutcomeAttr); v != "committed" || dos[0].Status.Code == codes.Error {
		t.Errorf("committed Do span: outcome %q status %v", v, dos[0].Status)
	}
	// fn's own error is told apart from failures of guard (guard.OutcomeLabel).
	if v := attr(dos[1].Attributes, redfenceotel.OutcomeAttr); v != guard.OutcomeFnError || dos[1].Status.Code != codes.Error {
		t.Errorf("Do span of fn's error: outcome %q status %v", v, dos[1].Status)
	}
	if attr(dos[0].Attributes, redfenceotel.KeyAttr) != "sku:1" || attr(dos[0].Attributes, redfenceotel.TokenAttr) == "" {
		t.Errorf("Do span attributes %v", dos[0].Attributes)
	}
	for _, d := range dos {
		if d.EndTime.Before(d.StartTime) {
			t.Errorf("Do span ends before it starts")
		}
	}

	// A statement that fails because fn's ctx ended is a failure, not fn's
	// own answer.
	err = g.Do(ctx, "sku:1", func(ctx context.Context, tx *guard.Tx) error {
		c, cancel := context.WithCancel(ctx)
		cancel()
		_, err := tx.ExecContext(c, "UPDATE counters SET n = n + 1 WHERE id = 1")
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}

	// Metrics.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	m := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			m[x.Name] = x.Data
		}
	}
	outcomes := map[string]int64{}
	for _, p := range m["redfence.do.calls"].(metricdata.Sum[int64]).DataPoints {
		v, _ := p.Attributes.Value(redfenceotel.OutcomeAttr)
		k, _ := p.Attributes.Value(redfenceotel.KeyAttr)
		if k.AsString() != "sku" {
			t.Errorf("outcome point without the mapped key: %v", p.Attributes)
		}
		outcomes[v.AsString()] += p.Value
	}
	if outcomes["committed"] != 1 || outcomes[guard.OutcomeFnError] != 1 || outcomes["failed"] != 1 {
		t.Errorf("outcomes %v, want committed 1, fn_error 1, failed 1", outcomes)
	}
	for _, name := range []string{"redfence.lock.wait", "redfence.lock.hold", "redfence.do.duration"} {
		var n uint64
		for _, p := range m[name].(metricdata.Histogram[float64]).DataPoints {
			n += p.Count
		}
		if n != 3 {
			t.Errorf("%s: %d observations, want 3", name, n)
		}
	}
	var held int64
	for _, p := range m["redfence.locks.held"].(metricdata.Sum[int64]).DataPoints {
		held += p.Value
	}
	if held != 0 {
		t.Errorf("redfence.locks.held = %d after every call returned, want 0", held)
	}
}

func TestInstrumentRejectsNil(t *testing.T) {
	if err := redfenceotel.Instrument(nil, nil); !errors.Is(err, redfenceotel.ErrNilOptions) {
		t.Fatalf("Instrument(nil) = %v", err)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func attr(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}
