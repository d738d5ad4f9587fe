package main

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// check is one dependency of the service and how to ask whether it answers.
type check struct {
	name string // "redis", "mysql"
	ping func(ctx context.Context) error
}

// checkResult is the answer of one check.
type checkResult struct {
	name string
	err  error
}

// runChecks asks every check at once, each under a deadline of its own
// (timeout), so that a server that hangs costs its own deadline, not the
// others', and is the only one blamed. ctx ends them all early.
func runChecks(ctx context.Context, checks []check, timeout time.Duration) []checkResult {
	out := make([]checkResult, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out[i] = checkResult{name: c.name, err: c.ping(cctx)}
		})
	}
	wg.Wait()
	return out
}

// failing returns the failed checks as errors naming their dependency, or
// nil when all answered.
func failing(results []checkResult) []*depError {
	var out []*depError
	for _, r := range results {
		if r.err != nil {
			out = append(out, &depError{which: r.name, err: r.err})
		}
	}
	return out
}

// healthResponse is the body of GET /healthz.
type healthResponse struct {
	// Status is "ok" when every server answers, "degraded" when Redis does
	// not but orders go on in database mode (-fallback database), and
	// "unavailable" when orders cannot be served.
	Status   string            `json:"status"`
	Mode     string            `json:"mode"`              // how the Guard holds keys now: "redis", or "database" while Redis is unavailable
	Fallback string            `json:"fallback"`          // "database" when orders go on without Redis, else "none"
	Failing  []string          `json:"failing,omitempty"` // the servers that did not answer
	Checks   map[string]string `json:"checks"`            // per server: "ok" or its error
}

// healthz is the readiness answer: 200 while the instance can serve orders,
// 503 naming the servers it lacks otherwise, within about one check
// timeout. MySQL is needed; Redis too, unless the Guard falls back on the
// database, whose mode is then ready: taking the instance out of service
// during a Redis outage would stop the orders the fallback serves.
func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	res := runChecks(r.Context(), a.checks, a.checkTimeout)
	body := healthResponse{Status: "ok", Mode: a.mode().String(), Fallback: "none", Checks: make(map[string]string, len(res))}
	if a.fallback {
		body.Fallback = "database"
	}
	ready := true
	for _, c := range res {
		if c.err == nil {
			body.Checks[c.name] = "ok"
			continue
		}
		body.Failing = append(body.Failing, c.name)
		body.Checks[c.name] = oneLine(c.err)
		if c.name == "redis" && a.fallback {
			body.Status = "degraded"
			continue
		}
		ready = false
	}
	status := http.StatusOK
	if !ready {
		body.Status = "unavailable"
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, body)
}

// livez is the liveness answer: 200 while the process serves HTTP, whatever
// its servers do. Restarting the instance does not bring a server back.
func (a *api) livez(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}
