package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/internal/testenv"
)

// exposition is a parsed /metrics answer: each sample's value by its name
// and labels as written, and each family's type.
type exposition struct {
	samples map[string]float64
	types   map[string]string
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// parseExposition reads the text exposition format strictly enough to catch
// what a scraper would reject: samples of undeclared families, values that
// are not numbers, families declared twice, histograms whose buckets are
// not cumulative or do not end in +Inf equal to _count.
func parseExposition(t *testing.T, r io.Reader) exposition {
	t.Helper()
	e := exposition{samples: map[string]float64{}, types: map[string]string{}}
	help := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, text, _ := strings.Cut(f, " ")
			if help[name] || text == "" {
				t.Errorf("HELP of %s repeated or empty: %q", name, line)
			}
			help[name] = true
			continue
		}
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			if _, dup := e.types[name]; dup || !help[name] {
				t.Errorf("TYPE of %s repeated or before its HELP", name)
			}
			e.types[name] = typ
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("not a sample line: %q", line)
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Errorf("value of %q: %v", line, err)
		}
		family := m[1]
		if e.types[family] == "" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(family, suffix); ok && e.types[base] == "histogram" {
					family = base
				}
			}
		}
		if e.types[family] == "" {
			t.Errorf("sample of an undeclared family: %q", line)
		}
		e.samples[m[1]+m[2]] = v
	}
	for name, typ := range e.types {
		if typ == "histogram" {
			e.checkHistogram(t, name)
		}
	}
	return e
}

func (e exposition) checkHistogram(t *testing.T, name string) {
	t.Helper()
	prev := -1.0
	for _, le := range append(formatBounds(durationBuckets), "+Inf") {
		v, ok := e.samples[name+`_bucket{le="`+le+`"}`]
		if !ok || v < prev {
			t.Errorf("%s: bucket le=%s is %v (present %v) after %v", name, le, v, ok, prev)
		}
		prev = v
	}
	if c, ok := e.samples[name+"_count"]; !ok || c != prev {
		t.Errorf("%s_count is %v, the +Inf bucket %v", name, c, prev)
	}
	if _, ok := e.samples[name+"_sum"]; !ok {
		t.Errorf("%s_sum missing", name)
	}
}

func formatBounds(bs []float64) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = formatValue(b)
	}
	return out
}

// get returns a sample's value, failing the test when it is missing.
// expect reports every sample of want whose value differs.
func (e exposition) expect(t *testing.T, want map[string]float64) {
	t.Helper()
	for sample, w := range want {
		if got := e.get(t, sample); got != w {
			t.Errorf("%s = %v, want %v", sample, got, w)
		}
	}
}

func (e exposition) get(t *testing.T, sample string) float64 {
	t.Helper()
	v, ok := e.samples[sample]
	if !ok {
		t.Fatalf("no sample %s", sample)
	}
	return v
}

func TestHistogramExposition(t *testing.T) {
	// Binary fractions, so that the sum is exact; an observation equal to a
	// bound belongs to that bound's bucket (le: less or equal).
	h := newHistogram([]float64{0.125, 0.5, 2})
	for _, v := range []float64{0.0625, 0.125, 0.25, 1, 1, 4} {
		h.observe(v)
	}
	var b strings.Builder
	e := &expo{w: &b}
	e.histogram("x_seconds", "Some durations.", &h)
	want := `# HELP x_seconds Some durations.
# TYPE x_seconds histogram
x_seconds_bucket{le="0.125"} 2
x_seconds_bucket{le="0.5"} 3
x_seconds_bucket{le="2"} 5
x_seconds_bucket{le="+Inf"} 6
x_seconds_sum 6.4375
x_seconds_count 6
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{0, "0"}, {7, "7"}, {0.025, "0.025"}, {1234567, "1234567"}, {2.5, "2.5"}} {
		if got := formatValue(c.v); got != c.want {
			t.Errorf("formatValue(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

// TestServeMetrics runs the serve subcommand, places orders over HTTP, and
// reads /metrics: the counts must be those of the orders made, and the
// answer must be valid exposition format.
func TestServeMetrics(t *testing.T) {
	testServers(t)
	ctx, stop := context.WithCancel(testCtx(t))
	defer stop()
	base, shutdown := startServe(ctx, t, "-sku", "gauge", "-stock", "9")
	defer func() {
		stop()
		if c, stderr := shutdown(); c != exitOK {
			t.Errorf("exit status %d; stderr: %s", c, stderr)
		}
	}()

	// 12 orders of one unit each for a stock of 9, 6 of them at once.
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	order := func() {
		resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(`{"sku":"gauge","qty":1}`))
		if err != nil {
			t.Error(err)
			return
		}
		_ = resp.Body.Close()
		mu.Lock()
		statuses[resp.StatusCode]++
		mu.Unlock()
	}
	for range 6 {
		wg.Go(order)
	}
	wg.Wait()
	for range 6 {
		order()
	}
	if statuses[http.StatusCreated] != 9 || statuses[http.StatusConflict] != 3 {
		t.Fatalf("statuses %v, want 9 x 201 and 3 x 409", statuses)
	}
	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(`{"sku":"nosuch","qty":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("order of an unknown SKU: %d, want 404", resp.StatusCode)
	}

	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %q", resp.StatusCode, ct)
	}
	e := parseExposition(t, resp.Body)
	for name, typ := range map[string]string{"redfence_do_calls_total": "counter", "redfence_do_retries_total": "counter",
		"redfence_lock_wait_seconds": "histogram", "redfence_lock_hold_seconds": "histogram", "redfence_do_duration_seconds": "histogram",
		"redfence_locks_held": "gauge", "redfence_fallback_active": "gauge"} {
		if e.types[name] != typ {
			t.Errorf("%s has type %q, want %s", name, e.types[name], typ)
		}
	}
	// A sold-out answer and an unknown SKU are fn's own errors, not
	// failures: an alert on failed must not fire on them.
	e.expect(t, map[string]float64{
		`redfence_do_calls_total{mode="redis",outcome="committed"}`:    9,
		`redfence_do_calls_total{mode="redis",outcome="fn_error"}`:     4,
		`redfence_do_calls_total{mode="redis",outcome="failed"}`:       0,
		`redfence_do_calls_total{mode="redis",outcome="fenced"}`:       0,
		`redfence_do_calls_total{mode="redis",outcome="lost"}`:         0,
		`redfence_do_calls_total{mode="redis",outcome="not_acquired"}`: 0,
		`redfence_do_calls_total{mode="database",outcome="committed"}`: 0,
		`redfence_do_retries_total`:                                    0,
		`redfence_lock_wait_seconds_count`:                             13,
		`redfence_lock_hold_seconds_count`:                             13,
		`redfence_do_duration_seconds_count`:                           13,
		`redfence_locks_held`:                                          0,
		`redfence_fallback_active`:                                     0,
	})
	if e.get(t, "redfence_lock_hold_seconds_sum") <= 0 {
		t.Error("the holds add up to no time")
	}
}

// listeningOn reads the serve subcommand's stdout up to its listening line
// and returns the base URL, or "" when the program ended first.
// startServe runs the serve subcommand with args on a free port and the
// test's Redis prefix until ctx ends, and returns the URL it listens on.
// shutdown, called once ctx has ended, returns its exit status and stderr.
func startServe(ctx context.Context, t *testing.T, args ...string) (base string, shutdown func() (int, string)) {
	t.Helper()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		defer pw.Close()
		code <- run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0", "-redis-prefix", testenv.Prefix(t)}, args...), pw, &stderr)
	}()
	base = listeningOn(t, pr)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	shutdown = func() (int, string) {
		c := <-code
		return c, stderr.String()
	}
	if base == "" {
		t.Fatalf("no listening line; stderr: %s", stderr.String())
	}
	return base, shutdown
}

func listeningOn(t *testing.T, stdout io.Reader) string {
	t.Helper()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "listening on "); ok {
			return strings.Fields(rest)[0]
		}
	}
	return ""
}

// TestMetricsInDatabaseMode kills the Redis of an API whose Guard falls back
// on the database: orders go on, and /metrics shows them in database mode
// with the fallback gauge at 1.
func TestMetricsInDatabaseMode(t *testing.T) {
	srv := testServers(t)
	own := testenv.RedisServer(t)
	srv.redisAddr = own.Addr
	ctx := testCtx(t)
	admin, err := openDatabase(ctx, srv, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := store.Reset(ctx, admin, "widget", 10); err != nil {
		t.Fatal(err)
	}
	m := newMetrics()
	inst, err := newInstance("api", instanceConfig{servers: srv, prefix: testenv.Prefix(t), poolSize: 4, lease: 5 * time.Second,
		fallback: true, hooks: m.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.close() })
	h := (&api{guard: inst.guard, db: inst.db, checks: inst.checks(), checkTimeout: time.Second,
		timeout: 5 * time.Second, instance: inst.name, metrics: m}).routes()

	for range 2 {
		if r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":1}`); r.status != http.StatusCreated {
			t.Fatalf("with Redis up: %d %v", r.status, r.body)
		}
	}
	own.Kill()
	// Each order's lock call fails and runs in database mode at once; the
	// third consecutive failure switches the Guard to database mode.
	for range 3 {
		if r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":1}`); r.status != http.StatusCreated {
			t.Fatalf("with Redis down: %d %v", r.status, r.body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	e := parseExposition(t, rec.Body)
	e.expect(t, map[string]float64{
		`redfence_do_calls_total{mode="redis",outcome="committed"}`:    2,
		`redfence_do_calls_total{mode="database",outcome="committed"}`: 3,
		`redfence_lock_wait_seconds_count`:                             5,
		`redfence_lock_hold_seconds_count`:                             5,
		`redfence_locks_held`:                                          0,
		`redfence_fallback_active`:                                     1,
	})
}
