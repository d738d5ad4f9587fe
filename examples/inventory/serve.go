package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redfence/redfence/examples/inventory/store"
	"github.com/redfence/redfence/guard"
)

// serveConfig configures the HTTP API.
type serveConfig struct {
	addr           string
	sku            string // seeded with stock when missing
	prefix         string // of the Redis keys
	stock          int
	poolSize       int
	lease          time.Duration
	requestTimeout time.Duration
	checkTimeout   time.Duration
	shutdown       time.Duration
	startServers   bool
	fallback       string // "none" or "database": guard.Options.Outage.Fallback
}

func runServe(ctx context.Context, l launcher, args []string, stdout, stderr io.Writer) int {
	cfg := serveConfig{}
	fs := flag.NewFlagSet("inventory serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&cfg.sku, "sku", "widget", "SKU created at start when it does not exist")
	fs.IntVar(&cfg.stock, "stock", 100, "stock of -sku when it is created")
	fs.StringVar(&cfg.prefix, "redis-prefix", defaultKeyPrefix, "prefix of the lock keys in Redis")
	fs.IntVar(&cfg.poolSize, "pool", 16, "database connections")
	fs.DurationVar(&cfg.lease, "lease", 10*time.Second, "lock lease")
	fs.DurationVar(&cfg.requestTimeout, "request-timeout", 5*time.Second, "bound on each request")
	fs.DurationVar(&cfg.checkTimeout, "check-timeout", time.Second, "bound on each dependency's ping in /healthz and error answers")
	fs.BoolVar(&cfg.startServers, "start-servers", true, startServersUsage)
	fs.DurationVar(&cfg.shutdown, "shutdown-timeout", 10*time.Second, "how long in-flight requests may take to finish on SIGINT/SIGTERM")
	fs.StringVar(&cfg.fallback, "fallback", "none",
		"while Redis is unavailable: none (orders answer 503) or database (orders go on, serialised by MySQL alone: guard.FallbackDatabase)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if cfg.checkTimeout <= 0 {
		fmt.Fprintln(stderr, "inventory serve: -check-timeout must be positive")
		return exitUsage
	}
	if cfg.fallback != "none" && cfg.fallback != "database" {
		fmt.Fprintf(stderr, "inventory serve: unknown -fallback %q (want none or database)\n", cfg.fallback)
		return exitUsage
	}
	srv, err := serversFromEnv(defaultDatabase)
	if err != nil {
		return fail(ctx, stderr, err)
	}
	srv, release, err := provide(ctx, srv, l, cfg.startServers, stderr)
	defer release()
	if err != nil {
		return fail(ctx, stderr, err)
	}
	admin, err := openDatabase(ctx, srv, 1)
	if err != nil {
		return fail(ctx, stderr, err)
	}
	created, err := store.SeedIfMissing(ctx, admin, cfg.sku, cfg.stock)
	_ = admin.Close()
	if err != nil {
		return fail(ctx, stderr, err)
	}
	m := newMetrics()
	inst, err := newInstance("serve", instanceConfig{servers: srv, prefix: cfg.prefix, poolSize: cfg.poolSize, lease: cfg.lease,
		logger:   slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		fallback: cfg.fallback == "database", hooks: m.hooks()})
	if err != nil {
		return fail(ctx, stderr, err)
	}
	defer inst.close()
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fail(ctx, stderr, err)
	}
	fmt.Fprintf(stdout, "servers: %s\n", srv.describe())
	if created {
		fmt.Fprintf(stdout, "created SKU %q with stock %d\n", cfg.sku, cfg.stock)
	}
	fmt.Fprintf(stdout, "listening on http://%s  (POST /orders {\"sku\":%q,\"qty\":1}, GET /stock/%s, GET /healthz, GET /livez, GET /metrics)\n", ln.Addr(), cfg.sku, cfg.sku)
	api := &api{guard: inst.guard, db: inst.db, checks: inst.checks(), checkTimeout: cfg.checkTimeout,
		fallback: inst.fallback, guardMode: inst.mode, timeout: cfg.requestTimeout, instance: inst.name, metrics: m}
	if err := serve(ctx, ln, api.routes(), cfg.shutdown); err != nil {
		return fail(ctx, stderr, err)
	}
	fmt.Fprintln(stdout, "stopped")
	return exitOK
}

// serve answers on ln until ctx ends, then stops accepting and waits up to
// grace for in-flight requests.
func serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// mode returns the Guard's mode now.
func (a *api) mode() guard.Mode {
	if a.guardMode == nil {
		return guard.ModeRedis
	}
	return a.guardMode()
}

// api is the HTTP face of the service.
type api struct {
	guard        *guard.Guard
	db           store.Execer
	checks       []check           // Redis and MySQL
	checkTimeout time.Duration     // bound on each check
	fallback     bool              // the Guard serves orders in database mode while Redis is unavailable
	guardMode    func() guard.Mode // the Guard's mode now; nil: Redis
	timeout      time.Duration
	instance     string
	metrics      http.Handler // GET /metrics; nil: not served
}

func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", a.postOrder)
	mux.HandleFunc("GET /stock/{sku}", a.getStock)
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /livez", a.livez)
	if a.metrics != nil {
		mux.Handle("GET /metrics", a.metrics)
	}
	return mux
}

type orderRequest struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type orderResponse struct {
	OrderID   string `json:"order_id"`
	SKU       string `json:"sku"`
	Qty       int    `json:"qty"`
	Remaining int    `json:"remaining"`
}

type stockResponse struct {
	SKU   string `json:"sku"`
	Stock int    `json:"stock"`
}

type errorResponse struct {
	Error     string `json:"error"`
	Available *int   `json:"available,omitempty"`
}

func (a *api) postOrder(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	var req orderRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{Error: "invalid JSON body: " + err.Error()})
		return
	}
	if dec.More() {
		writeJSON(w, http.StatusBadRequest, errorResponse{Error: "invalid JSON body: more than one value"})
		return
	}
	o := store.Order{ID: randomHex(16), SKU: req.SKU, Qty: req.Qty, Instance: a.instance}
	if err := o.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{Error: err.Error()})
		return
	}
	// The stock is read with the fence claim, in one request (DoRead), and
	// the order written in fn.
	var stock, left int
	err := a.guard.DoRead(ctx, lockKey(o.SKU), guard.ReadOne(&stock, store.StockQuery, o.SKU), func(ctx context.Context, tx *guard.Tx) error {
		o.Token = tx.Token()
		var err error
		left, err = store.SellFrom(ctx, tx, o, stock, nil)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = fmt.Errorf("%w: %q", store.ErrUnknownSKU, o.SKU)
	}
	if err != nil {
		a.writeError(ctx, w, err)
		return
	}
	writeJSON(w, http.StatusCreated, orderResponse{OrderID: o.ID, SKU: o.SKU, Qty: o.Qty, Remaining: left})
}

func (a *api) getStock(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	sku := r.PathValue("sku")
	if err := (store.Order{ID: "-", SKU: sku, Qty: 1}).Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{Error: err.Error()})
		return
	}
	stock, err := store.Stock(ctx, a.db, sku)
	if err != nil {
		a.writeError(ctx, w, err)
		return
	}
	writeJSON(w, http.StatusOK, stockResponse{SKU: sku, Stock: stock})
}

// writeError maps an error to a status. Errors the service knows have their
// own; for any other, the dependencies are pinged so that an outage answers
// 503 naming the server, and everything else is a 500.
func (a *api) writeError(ctx context.Context, w http.ResponseWriter, err error) {
	var soldOut *store.SoldOutError
	switch {
	case errors.As(err, &soldOut):
		writeJSON(w, http.StatusConflict, errorResponse{Error: "sold out", Available: &soldOut.Available})
		return
	case errors.Is(err, store.ErrUnknownSKU):
		writeJSON(w, http.StatusNotFound, errorResponse{Error: err.Error()})
		return
	case errors.Is(err, store.ErrInvalidOrder), errors.Is(err, guard.ErrInvalidKey):
		writeJSON(w, http.StatusBadRequest, errorResponse{Error: err.Error()})
		return
	case errors.Is(err, guard.ErrFenced), errors.Is(err, guard.ErrLockLost), errors.Is(err, guard.ErrNotCommitted):
		// Nothing was written; the client may try again.
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorResponse{Error: "order not placed, try again: " + err.Error()})
		return
	}
	// The request's own deadline may be spent: the checks get their own.
	if down := failing(runChecks(context.WithoutCancel(ctx), a.checks, a.checkTimeout)); len(down) > 0 {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, errorResponse{Error: "a dependency is down: " + dependencyDown(down)})
		return
	}
	if errors.Is(err, guard.ErrOutcomeUnknown) {
		writeJSON(w, http.StatusInternalServerError, errorResponse{Error: "outcome unknown: check the order before retrying"})
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		writeJSON(w, http.StatusServiceUnavailable, errorResponse{Error: "timed out waiting for the SKU's lock"})
		return
	}
	writeJSON(w, http.StatusInternalServerError, errorResponse{Error: "internal error"})
}

// dependencyDown turns failed checks into one line naming the servers.
func dependencyDown(down []*depError) string {
	parts := make([]string, len(down))
	for i, d := range down {
		parts[i] = oneLine(d)
	}
	return strings.Join(parts, "; ")
}

// depError names the dependency whose ping failed.
type depError struct {
	which string
	err   error
}

func (e *depError) Error() string { return e.which + " unavailable: " + e.err.Error() }
func (e *depError) Unwrap() error { return e.err }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
