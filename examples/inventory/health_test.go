package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/internal/testenv"
)

// blackHole returns the address of a listener that accepts connections and
// never answers, as a hung server does, and a function that closes it and
// its connections, which also runs when the test ends.
func blackHole(t *testing.T) (addr string, hangUp func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	var once sync.Once
	hangUp = func() {
		once.Do(func() {
			_ = ln.Close()
			<-done
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				_ = c.Close()
			}
		})
	}
	t.Cleanup(hangUp)
	return ln.Addr().String(), hangUp
}

// healthAPI returns the API of an instance on redisAddr and mysqlDSN whose
// checks are each bounded by timeout. Call hangUp (if any) before the
// instance is closed: closing a Locker whose server hangs waits out its
// timeouts.
func healthAPI(t *testing.T, redisAddr, mysqlDSN string, timeout time.Duration) *api {
	t.Helper()
	inst, err := newInstance("health", instanceConfig{servers: servers{redisAddr: redisAddr, mysqlDSN: mysqlDSN},
		prefix: testenv.Prefix(t), poolSize: 2, lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.close() })
	return &api{guard: inst.guard, db: inst.db, checks: inst.checks(), checkTimeout: timeout, timeout: 3 * time.Second, instance: inst.name}
}

func TestHealthz(t *testing.T) {
	srv := testServers(t)
	deadRedis, deadMySQL := closedAddr(t), "root@tcp("+closedAddr(t)+")/"
	cases := []struct {
		name, redis, mysql string
		status             int
		failing            []string
	}{
		{"both answer", srv.redisAddr, srv.mysqlDSN, http.StatusOK, nil},
		{"Redis down", deadRedis, srv.mysqlDSN, http.StatusServiceUnavailable, []string{"redis"}},
		{"MySQL down", srv.redisAddr, deadMySQL, http.StatusServiceUnavailable, []string{"mysql"}},
		{"both down", deadRedis, deadMySQL, http.StatusServiceUnavailable, []string{"redis", "mysql"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := healthAPI(t, c.redis, c.mysql, time.Second).routes()
			r := do(t, h, "GET", "/healthz", "")
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %v", r.status, c.status, r.body)
			}
			if got := fmt.Sprint(r.body["failing"]); c.failing != nil && got != fmt.Sprint(c.failing) {
				t.Errorf("failing %s, want %v", got, c.failing)
			}
			checks, _ := r.body["checks"].(map[string]any)
			for _, name := range []string{"redis", "mysql"} {
				want := "ok"
				for _, f := range c.failing {
					if f == name {
						want = "" // an error message
					}
				}
				got := fmt.Sprint(checks[name])
				if (want == "ok") != (got == "ok") || got == "" || got == "<nil>" {
					t.Errorf("checks[%s] = %q, want %s", name, got, map[bool]string{true: "ok", false: "its error"}[want == "ok"])
				}
			}
			wantStatus := map[bool]string{true: "ok", false: "unavailable"}[c.status == http.StatusOK]
			if r.body["status"] != wantStatus {
				t.Errorf("status field %v, want %s", r.body["status"], wantStatus)
			}
		})
	}
	if r := do(t, healthAPI(t, srv.redisAddr, srv.mysqlDSN, time.Second).routes(), "POST", "/healthz", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d", r.status)
	}
}

// TestHealthzHungServerCostsItsOwnDeadline: a Redis that accepts and never
// answers is blamed alone, after about one check timeout; MySQL, checked at
// the same time on its own deadline, is reported as answering.
func TestHealthzHungServerCostsItsOwnDeadline(t *testing.T) {
	srv := testServers(t)
	const timeout = 300 * time.Millisecond
	hung, hangUp := blackHole(t)
	h := healthAPI(t, hung, srv.mysqlDSN, timeout).routes()
	t.Cleanup(hangUp) // runs before the instance is closed
	start := time.Now()
	r := do(t, h, "GET", "/healthz", "")
	took := time.Since(start)
	if r.status != http.StatusServiceUnavailable || fmt.Sprint(r.body["failing"]) != "[redis]" {
		t.Fatalf("%d %v, want 503 failing [redis]", r.status, r.body)
	}
	if took < timeout || took > timeout+700*time.Millisecond {
		t.Errorf("answered after %v, want about the check timeout %v", took, timeout)
	}
}

// TestOrderErrorBlamesOnlyTheHungServer: an order that fails because Redis
// hangs answers 503 naming Redis alone. Checks sharing one deadline, one
// after the other, spent it on Redis and blamed MySQL too.
func TestOrderErrorBlamesOnlyTheHungServer(t *testing.T) {
	srv := testServers(t)
	ctx := testCtx(t)
	admin, err := openDatabase(ctx, srv, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	hung, hangUp := blackHole(t)
	srv.redisAddr = hung
	inst, err := newInstance("hung", instanceConfig{servers: srv, prefix: testenv.Prefix(t), poolSize: 2, lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.close()
	defer hangUp() // first: closing a Locker whose server hangs waits out its timeouts
	a := &api{guard: inst.guard, db: inst.db, checks: inst.checks(), checkTimeout: 300 * time.Millisecond,
		timeout: 300 * time.Millisecond, instance: inst.name}
	r := do(t, a.routes(), "POST", "/orders", `{"sku":"widget","qty":1}`)
	msg := fmt.Sprint(r.body["error"])
	if r.status != http.StatusServiceUnavailable || !strings.Contains(msg, "redis unavailable") {
		t.Fatalf("order with Redis hung: %d %v", r.status, r.body)
	}
	if strings.Contains(msg, "mysql") {
		t.Errorf("MySQL blamed although it answers: %s", msg)
	}
}

func TestRunChecksAreConcurrent(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	block := func(ctx context.Context) error {
		started.Done()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	go func() { started.Wait(); close(release) }() // both must be running at once
	res := runChecks(context.Background(), []check{{"a", block}, {"b", block}}, 10*time.Second)
	if len(failing(res)) != 0 {
		t.Fatalf("checks failed: %v", res)
	}
}

// TestHealthzInDatabaseMode: with -fallback database, an instance whose
// Redis is gone still serves orders, so it is ready (200) and says how:
// degraded, in database mode, Redis failing and MySQL answering. Without the
// fallback the same outage is unavailable (503). /livez answers 200 either
// way.
func TestHealthzInDatabaseMode(t *testing.T) {
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
	apiFor := func(fallback bool) http.Handler {
		inst, err := newInstance("health", instanceConfig{servers: srv, prefix: testenv.Prefix(t), poolSize: 4, lease: 5 * time.Second,
			fallback: fallback})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = inst.close() })
		return (&api{guard: inst.guard, db: inst.db, checks: inst.checks(), checkTimeout: time.Second, fallback: inst.fallback,
			guardMode: inst.mode, timeout: 5 * time.Second, instance: inst.name}).routes()
	}
	withFallback, without := apiFor(true), apiFor(false)
	if r := do(t, withFallback, "GET", "/healthz", ""); r.status != http.StatusOK || r.body["status"] != "ok" ||
		r.body["mode"] != "redis" || r.body["fallback"] != "database" {
		t.Fatalf("with Redis up: %d %v", r.status, r.body)
	}

	own.Kill()
	// The third order that finds Redis gone switches the Guard to database mode.
	for range 3 {
		if r := do(t, withFallback, "POST", "/orders", `{"sku":"widget","qty":1}`); r.status != http.StatusCreated {
			t.Fatalf("order with Redis down: %d %v", r.status, r.body)
		}
	}
	r := do(t, withFallback, "GET", "/healthz", "")
	checks, _ := r.body["checks"].(map[string]any)
	if r.status != http.StatusOK || r.body["status"] != "degraded" || r.body["mode"] != "database" ||
		fmt.Sprint(r.body["failing"]) != "[redis]" || checks["mysql"] != "ok" || checks["redis"] == "ok" || checks["redis"] == nil {
		t.Fatalf("in database mode: %d %v, want 200, degraded, database mode, redis failing", r.status, r.body)
	}
	if r := do(t, without, "GET", "/healthz", ""); r.status != http.StatusServiceUnavailable || r.body["status"] != "unavailable" ||
		r.body["fallback"] != "none" {
		t.Fatalf("without the fallback: %d %v, want 503", r.status, r.body)
	}
	for _, h := range []http.Handler{withFallback, without} {
		if r := do(t, h, "GET", "/livez", ""); r.status != http.StatusOK || r.body["status"] != "alive" {
			t.Errorf("GET /livez: %d %v", r.status, r.body)
		}
	}
}
