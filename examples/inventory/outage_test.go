package main

import (
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// TestRedisOutageFromTheCommandLine runs the guard mode as a user would with
// -redis-outage kill: the run's own redis-server is killed after 20 orders
// and restarted. Orders must be served in Redis mode and in database mode,
// and exactly the stock sold.
func TestRedisOutageFromTheCommandLine(t *testing.T) {
	testServers(t)
	var stdout, stderr strings.Builder
	code := run(testCtx(t), []string{"-mode", "guard", "-buyers", "16", "-instances", "2", "-stock", "120", "-orders", "10",
		"-pool", "4", "-pause", "0", "-failover=false", "-redis-prefix", testenv.Prefix(t),
		"-redis-outage", "kill", "-outage-after", "20", "-outage-for", "2s"}, &stdout, &stderr)
	out := stdout.String()
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr.String())
	}
	t.Log(out)
	for _, want := range []string{
		"guard:     never oversold: 120 orders for 120 units, final stock 0 = 120 - 120",
		"killed with SIGKILL after 20 accepted orders, restarted empty",
		"result: PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	m := regexp.MustCompile(`served: redis mode (\d+) \((\d+) before the outage, \d+ during it, \d+ after\), database fallback (\d+)`).
		FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no served line in the report")
	}
	redisMode, before, database := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
	if before < 20 || database == 0 || redisMode+database != 120 {
		t.Errorf("served in redis mode %d (%d before the outage), in database mode %d; want at least 20 before, some in the database, 120 in all",
			redisMode, before, database)
	}
	if !strings.Contains(stderr.String(), "killed with SIGKILL redis-server") {
		t.Errorf("the outage was not announced on stderr:\n%s", stderr.String())
	}
}

// TestRedisOutagePause freezes the guard mode's Redis with SIGSTOP instead:
// connections stay open and nothing answers, which the Guards must notice by
// their timeouts and health probes.
func TestRedisOutagePause(t *testing.T) {
	srv := testServers(t)
	cfg := demoConfig{
		modes: []string{modeGuard}, buyers: 16, instances: 2, stock: 120, orders: 10, qty: 1, poolSize: 4,
		sku: "widget", prefix: testenv.Prefix(t), lease: 250 * time.Millisecond, timeout: 45 * time.Second,
		outage: outagePause, outageAfter: 20, outageLength: 2 * time.Second,
	}
	results, err := runDemo(testCtx(t), cfg, srv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := results[0]
	o := r.outage
	t.Logf("%+v failed=%d errs=%q injected=%q served: %s switches=%v", r.totals, r.failed.Load(), r.errs, r.injected, o.servedText(), r.switches)
	if !r.totals.OK() || r.totals.Orders != cfg.stock || r.failed.Load() != 0 {
		t.Errorf("%+v with %d failed orders (%q); want exactly the stock sold, nothing lost", r.totals, r.failed.Load(), r.errs)
	}
	if o.redis[phaseBefore].Load() < 20 || o.database.Load() == 0 {
		t.Errorf("served %s; want at least 20 in Redis mode before the outage and some in database mode", o.servedText())
	}
	if r.switches[0] == 0 {
		t.Error("no Guard switched to database mode")
	}
	if !strings.Contains(o.report(), "frozen with SIGSTOP after 20 accepted orders, resumed (SIGCONT)") {
		t.Errorf("injected: %q", o.report())
	}
}

func TestOutageFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-redis-outage", "flood"}, "unknown -redis-outage"},
		{[]string{"-redis-outage", "kill", "-mode", "unsafe,redis-only"}, "add it to -mode"},
		{[]string{"-redis-outage", "kill", "-stock", "10", "-outage-after", "10"}, "-outage-after must be between 0 and 9"},
		{[]string{"-redis-outage", "pause", "-outage-for", "0s"}, "-outage-for must be positive"},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), c.args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit status %d, stderr %q; want %d and %q", c.args, code, stderr.String(), exitUsage, c.want)
		}
	}
	cfg, err := parseDemoFlags([]string{"-redis-outage", "kill"}, io.Discard)
	if err != nil || cfg.outage != outageKill || cfg.outageAfter != 0 || cfg.outageLength != 2*time.Second {
		t.Fatalf("defaults with -redis-outage kill: %+v %v", cfg, err)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
