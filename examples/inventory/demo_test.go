package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/internal/testenv"
)

// TestDemoModesSideBySide is the example's promise, on a small scale: in one
// run, unsafe and redis-only (with a holder stalled past its lease) oversell,
// and guard, under the same stalls, sells exactly its stock with no lost
// update.
func TestDemoModesSideBySide(t *testing.T) {
	srv := testServers(t)
	cfg := demoConfig{
		modes: allModes, buyers: 16, instances: 3, stock: 64, orders: 8, qty: 1, poolSize: 4,
		sku: "widget", prefix: testenv.Prefix(t),
		pause: 600 * time.Millisecond, failover: true, lease: 200 * time.Millisecond, timeout: 45 * time.Second,
	}
	results, err := runDemo(testCtx(t), cfg, srv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(allModes) {
		t.Fatalf("%d results", len(results))
	}
	byMode := map[string]*modeResult{}
	for _, r := range results {
		byMode[r.mode] = r
		t.Logf("%-10s %+v fenced=%d lockLost=%d lostAtUnlock=%d failed=%d errs=%q injected=%q", r.mode, r.totals,
			r.fenced.Load(), r.lockLost.Load(), r.lostAtUnlock.Load(), r.failed.Load(), r.errs, r.injected)
	}
	if u := byMode[modeUnsafe]; u.totals.Oversold == 0 || u.totals.Lost == 0 {
		t.Errorf("unsafe did not oversell: %+v", u.totals)
	}
	ro := byMode[modeRedisOnly]
	if len(ro.injected) != 4 {
		t.Errorf("redis-only: injected %q, want the three stalls and the failover", ro.injected)
	}
	if ro.totals.Oversold == 0 {
		t.Errorf("redis-only with a holder stalled past its lease did not oversell: %+v", ro.totals)
	}
	g := byMode[modeGuard]
	if len(g.injected) != 4 {
		t.Errorf("guard: injected %q, want the three stalls and the failover", g.injected)
	}
	if !g.totals.OK() || g.totals.Orders != cfg.stock || g.totals.Final != 0 || g.failed.Load() != 0 {
		t.Errorf("guard: %+v, %d failed orders (%q); want exactly the stock sold, nothing lost", g.totals, g.failed.Load(), g.errs)
	}
	if g.lockLost.Load()+g.fenced.Load() == 0 {
		t.Errorf("guard: no attempt was rolled back although holders stalled past their lease")
	}
	b := byMode[modeBatched]
	if !b.totals.OK() || b.totals.Orders != cfg.stock || b.totals.Final != 0 || b.failed.Load() != 0 {
		t.Errorf("batched: %+v, %d failed orders (%q); want exactly the stock sold, nothing lost", b.totals, b.failed.Load(), b.errs)
	}

	var out strings.Builder
	if !writeReport(&out, cfg, results) {
		t.Fatalf("report says unsafe:\n%s", out.String())
	}
	for _, want := range []string{"OVERSOLD", "unsafe:", "redis-only:", "guard:     never oversold", "froze for 600ms", "result: PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunGuardModeFromTheCommandLine runs the program as a user would, with
// flags and the environment, in the one mode that must always pass.
func TestRunGuardModeFromTheCommandLine(t *testing.T) {
	testServers(t)
	var stdout, stderr strings.Builder
	code := run(testCtx(t), []string{"-mode", "guard", "-buyers", "8", "-instances", "2", "-stock", "20", "-orders", "4",
		"-pause", "0", "-failover=false", "-redis-prefix", testenv.Prefix(t)}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"guard:     never oversold: 20 orders for 20 units, final stock 0 = 20 - 20", "injected: nothing (-pause 0 -failover=false)", "result: PASS"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "guard") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
}

func TestReportFailsWhenGuardOversells(t *testing.T) {
	cfg := demoConfig{buyers: 1, instances: 1, stock: 10, orders: 1, qty: 1, sku: "s"}
	bad := &modeResult{mode: modeGuard, totals: store.Totals{Initial: 10, Orders: 11, Sold: 11, Final: 0, Oversold: 1, Lost: 1}}
	unsafe := &modeResult{mode: modeUnsafe, totals: store.Totals{Initial: 10, Orders: 12, Sold: 12, Final: 3, Oversold: 2, Lost: 5}}
	var out strings.Builder
	if writeReport(&out, cfg, []*modeResult{unsafe, bad}) {
		t.Fatalf("a guard oversell passed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "result: FAIL") || !strings.Contains(out.String(), "guard:     OVERSOLD 1 units") {
		t.Fatalf("report:\n%s", out.String())
	}
	// An unsafe mode that oversells does not fail the run: that is its point.
	out.Reset()
	if !writeReport(&out, cfg, []*modeResult{unsafe}) {
		t.Fatalf("unsafe oversell failed the run:\n%s", out.String())
	}
	// Neither does a guard run with failed orders pass.
	failed := &modeResult{mode: modeGuard, totals: store.Totals{Initial: 10, Orders: 10, Sold: 10}}
	failed.addErr(context.DeadlineExceeded)
	if writeReport(&out, cfg, []*modeResult{failed}) {
		t.Fatal("a guard run with failed orders passed")
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(101-i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}} {
		if got := percentile(lat, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if percentile(nil, 99) != 0 || percentile([]time.Duration{7}, 99) != 7 {
		t.Fatal("edge cases")
	}
}

// TestFreezerHoldsBackRedisTraffic checks the fault injection itself: while
// an instance is frozen its Redis commands wait, as a paused process's would.
func TestFreezerHoldsBackRedisTraffic(t *testing.T) {
	rdb := testenv.Redis(t)
	f := newFreezer()
	rdb.AddHook(f)
	ctx := testCtx(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	f.begin(300 * time.Millisecond)
	until := f.until
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(until) {
		t.Fatalf("PING answered %v before the freeze ended", until.Sub(now))
	}

	f.begin(time.Minute)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := rdb.Ping(short).Err(); err == nil {
		t.Fatal("a PING whose context ended went through a freeze")
	}
	f.thaw()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("after the thaw: %v", err)
	}
}

// The batched mode sells exactly its stock, and its buyers really share
// transactions: the orders carry far fewer tokens than there are orders.
func TestBatchedModeSharesTransactions(t *testing.T) {
	srv := testServers(t)
	cfg := demoConfig{
		modes: []string{modeBatched}, buyers: 32, instances: 2, stock: 160, orders: 10, qty: 1, poolSize: 4,
		sku: "widget", prefix: testenv.Prefix(t), lease: 2 * time.Second, timeout: 45 * time.Second,
	}
	results, err := runDemo(testCtx(t), cfg, srv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := results[0]
	if !b.totals.OK() || b.totals.Orders != cfg.stock || b.failed.Load() != 0 {
		t.Fatalf("batched: %+v, %d failed (%q)", b.totals, b.failed.Load(), b.errs)
	}
	db, err := sqlx.Open("mysql", srv.mysqlDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var orders, tokens int
	if err := db.QueryRowContext(testCtx(t), "SELECT COUNT(*), COUNT(DISTINCT token) FROM orders WHERE sku = ?", cfg.sku).Scan(&orders, &tokens); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d orders in %d transactions", orders, tokens)
	if orders != cfg.stock || tokens*2 > orders {
		t.Fatalf("%d orders under %d tokens: want %d orders sharing transactions (at most half as many tokens)", orders, tokens, cfg.stock)
	}
}
