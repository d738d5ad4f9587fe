package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// newTestAPI returns the API of one instance on the test's servers, with
// sku stocked with stock.
func newTestAPI(t *testing.T, srv servers, prefix, sku string, stock int) (*api, *instance) {
	t.Helper()
	ctx := testCtx(t)
	admin, err := openDatabase(ctx, srv, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if sku != "" {
		if err := store.Reset(ctx, admin, sku, stock); err != nil {
			t.Fatal(err)
		}
	}
	inst, err := newInstance("api", instanceConfig{servers: srv, prefix: prefix, poolSize: 4, lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.close() })
	return &api{guard: inst.guard, db: inst.db, checks: inst.checks(), checkTimeout: time.Second,
		timeout: 3 * time.Second, instance: inst.name}, inst
}

type reply struct {
	status int
	body   map[string]any
	header http.Header
}

func do(t *testing.T, h http.Handler, method, path, body string) reply {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	r := reply{status: rec.Code, header: rec.Header(), body: map[string]any{}}
	if rec.Body.Len() > 0 && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(rec.Body.Bytes(), &r.body); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, rec.Body.String(), err)
		}
	}
	return r
}

func TestHandlers(t *testing.T) {
	srv := testServers(t)
	a, _ := newTestAPI(t, srv, testenv.Prefix(t), "widget", 3)
	h := a.routes()

	r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":2}`)
	if r.status != http.StatusCreated || r.body["remaining"] != 1.0 || r.body["order_id"] == "" || r.body["qty"] != 2.0 {
		t.Fatalf("order: %d %v", r.status, r.body)
	}
	if r := do(t, h, "GET", "/stock/widget", ""); r.status != http.StatusOK || r.body["stock"] != 1.0 || r.body["sku"] != "widget" {
		t.Fatalf("stock: %d %v", r.status, r.body)
	}
	if r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":2}`); r.status != http.StatusConflict || r.body["available"] != 1.0 {
		t.Fatalf("over-large order: %d %v", r.status, r.body)
	}
	if r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":1}`); r.status != http.StatusCreated || r.body["remaining"] != 0.0 {
		t.Fatalf("last unit: %d %v", r.status, r.body)
	}
	if r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":1}`); r.status != http.StatusConflict || r.body["error"] != "sold out" {
		t.Fatalf("sold out: %d %v", r.status, r.body)
	}

	for _, c := range []struct{ name, body string }{
		{"not JSON", `sku=widget`},
		{"unknown field", `{"sku":"widget","qty":1,"price":3}`},
		{"two values", `{"sku":"widget","qty":1} {}`},
		{"zero qty", `{"sku":"widget","qty":0}`},
		{"negative qty", `{"sku":"widget","qty":-1}`},
		{"huge qty", `{"sku":"widget","qty":1000000}`},
		{"missing sku", `{"qty":1}`},
		{"qty as string", `{"sku":"widget","qty":"1"}`},
		{"sku too long", `{"sku":"` + strings.Repeat("x", store.MaxSKULen+1) + `","qty":1}`},
	} {
		if r := do(t, h, "POST", "/orders", c.body); r.status != http.StatusBadRequest || r.body["error"] == nil {
			t.Errorf("%s: %d %v, want 400 with an error", c.name, r.status, r.body)
		}
	}
	if r := do(t, h, "POST", "/orders", `{"sku":"gadget","qty":1}`); r.status != http.StatusNotFound {
		t.Errorf("unknown SKU order: %d %v", r.status, r.body)
	}
	if r := do(t, h, "GET", "/stock/gadget", ""); r.status != http.StatusNotFound {
		t.Errorf("unknown SKU stock: %d %v", r.status, r.body)
	}
	if r := do(t, h, "GET", "/orders", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /orders: %d", r.status)
	}
	if r := do(t, h, "DELETE", "/stock/widget", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /stock: %d", r.status)
	}
}

// TestConcurrentOrdersAcrossInstances: two API instances (separate clients,
// Lockers and pools) take 40 concurrent orders for 25 units: exactly 25 are
// accepted, the rest are told "sold out", and the stock ends at 0.
func TestConcurrentOrdersAcrossInstances(t *testing.T) {
	srv := testServers(t)
	prefix := testenv.Prefix(t)
	a1, _ := newTestAPI(t, srv, prefix, "widget", 25)
	a2, _ := newTestAPI(t, srv, prefix, "", 0)
	handlers := []http.Handler{a1.routes(), a2.routes()}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			r := do(t, handlers[i%2], "POST", "/orders", `{"sku":"widget","qty":1}`)
			mu.Lock()
			statuses[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[http.StatusCreated] != 25 || statuses[http.StatusConflict] != 15 {
		t.Fatalf("statuses %v, want 25 x 201 and 15 x 409", statuses)
	}
	if r := do(t, handlers[1], "GET", "/stock/widget", ""); r.body["stock"] != 0.0 {
		t.Fatalf("final stock %v", r.body)
	}
}

// TestDependencyDownAnswers503 stops each server in turn behind a running
// API: orders and stock reads answer 503 naming the server, not 500.
func TestDependencyDownAnswers503(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		srv := testServers(t)
		own := testenv.RedisServer(t)
		srv.redisAddr = own.Addr
		a, _ := newTestAPI(t, srv, testenv.Prefix(t), "widget", 5)
		h := a.routes()
		if r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":1}`); r.status != http.StatusCreated {
			t.Fatalf("before the outage: %d %v", r.status, r.body)
		}
		own.Kill()
		r := do(t, h, "POST", "/orders", `{"sku":"widget","qty":1}`)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(r.body["error"]), "redis unavailable") ||
			r.header.Get("Retry-After") == "" {
			t.Fatalf("order with Redis down: %d %v", r.status, r.body)
		}
		if strings.Contains(fmt.Sprint(r.body["error"]), "mysql") {
			t.Errorf("MySQL blamed although it answers: %v", r.body["error"])
		}
		// Reads need only MySQL and keep working.
		if r := do(t, h, "GET", "/stock/widget", ""); r.status != http.StatusOK || r.body["stock"] != 4.0 {
			t.Fatalf("stock with Redis down: %d %v", r.status, r.body)
		}
	})
	t.Run("mysql", func(t *testing.T) {
		srv := testServers(t)
		a, inst := newTestAPI(t, srv, testenv.Prefix(t), "widget", 5)
		// The instance's pool now points at a port nothing listens on.
		_ = inst.db.Close()
		dead, err := openPool("root@tcp("+closedAddr(t)+")/x", 2)
		if err != nil {
			t.Fatal(err)
		}
		inst.db = dead
		inst.guard = newGuard(inst, 0)
		a.db, a.guard = dead, inst.guard
		h := a.routes()
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/orders", `{"sku":"widget","qty":1}`},
			{"GET", "/stock/widget", ""},
		} {
			r := do(t, h, c.method, c.path, c.body)
			if r.status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(r.body["error"]), "mysql unavailable") {
				t.Errorf("%s %s with MySQL down: %d %v", c.method, c.path, r.status, r.body)
			}
		}
		// Nothing was left locked: the SKU's lock is free for the next caller.
		lk, err := inst.locker.TryLock(testCtx(t), lockKey("widget"))
		if err != nil {
			t.Fatalf("the lock was left held after a MySQL failure: %v", err)
		}
		_ = lk.Unlock(testCtx(t))
	})
}

// TestGracefulShutdown: a request in flight when the signal arrives is
// finished and answered; then serve returns without error.
func TestGracefulShutdown(t *testing.T) {
	srv := testServers(t)
	prefix := testenv.Prefix(t)
	a, _ := newTestAPI(t, srv, prefix, "widget", 5)

	// Hold the SKU's lock from elsewhere so the request waits in the queue.
	rdb := testenv.Redis(t)
	other := redislock.New(rdb, &redislock.Options{Prefix: prefix})
	defer other.Close()
	ctx := testCtx(t)
	held, err := other.Lock(ctx, lockKey("widget"))
	if err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serve(sctx, ln, a.routes(), 10*time.Second) }()

	answered := make(chan *http.Response, 1)
	reqErr := make(chan error, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/orders", "application/json", strings.NewReader(`{"sku":"widget","qty":1}`))
		if err != nil {
			reqErr <- err
			return
		}
		answered <- resp
	}()
	waitQueued(t, rdb, prefix)

	stop() // the signal
	select {
	case err := <-served:
		t.Fatalf("serve returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-answered:
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("in-flight order: %d %s", resp.StatusCode, body)
		}
	case err := <-reqErr:
		t.Fatalf("in-flight order failed: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/stock/widget"); err == nil {
		t.Fatal("the server still answers after shutdown")
	}
}

// waitQueued returns once a waiter is queued for the widget's lock under
// prefix: the request is in flight, waiting for the lock. Redis offers no
// notification of that, so the queue is polled.
func waitQueued(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	names, err := redislock.KeyNamesFor(prefix, lockKey("widget"))
	if err != nil {
		t.Fatal(err)
	}
	q := names.Queue
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.ZCard(context.Background(), q).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter queued in %s", q)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeCommand runs the serve subcommand as a user would and stops it
// with its context, as SIGINT does.
func TestServeCommand(t *testing.T) {
	testServers(t)
	ctx, stop := context.WithCancel(testCtx(t))
	defer stop()
	base, shutdown := startServe(ctx, t, "-sku", "gizmo", "-stock", "7")
	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(`{"sku":"gizmo","qty":3}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("order: %d", resp.StatusCode)
	}
	resp, err = http.Get(base + "/stock/gizmo")
	if err != nil {
		t.Fatal(err)
	}
	var st stockResponse
	_ = json.NewDecoder(resp.Body).Decode(&st)
	_ = resp.Body.Close()
	if st.Stock != 4 {
		t.Fatalf("stock after ordering 3 of 7: %+v", st)
	}
	stop()
	if c, stderr := shutdown(); c != exitOK {
		t.Fatalf("exit status %d; stderr: %s", c, stderr)
	}
}
