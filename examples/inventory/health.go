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
	Status  string            `json:"status"`            // "ok" or "unavailable"
	Failing []string          `json:"failing,omitempty"` // the dependencies that did not answer
	Checks  map[string]string `json:"checks"`            // per dependency: "ok" or its error
}

// healthz answers 200 when every dependency answers and 503 naming those
// that do not, within about one check timeout.
func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	res := runChecks(r.Context(), a.checks, a.checkTimeout)
	body := healthResponse{Status: "ok", Checks: make(map[string]string, len(res))}
	for _, c := range res {
		if c.err != nil {
			body.Failing = append(body.Failing, c.name)
			body.Checks[c.name] = oneLine(c.err)
			continue
		}
		body.Checks[c.name] = "ok"
	}
	status := http.StatusOK
	if len(body.Failing) > 0 {
		body.Status = "unavailable"
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, body)
}
