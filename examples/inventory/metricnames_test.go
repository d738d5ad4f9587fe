package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// otelInstruments reads the instruments extra/redfenceotel creates from its
// source: each one's name as OpenTelemetry's Prometheus exporter writes it
// (dots as underscores, _seconds for unit s, _total for counters) and its
// Prometheus type.
func otelInstruments(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../../extra/redfenceotel/*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Units given through a variable: seconds := metric.WithUnit("s").
		units := map[string]string{}
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 {
				if id, ok := as.Lhs[0].(*ast.Ident); ok {
					if u, ok := unitOf(as.Rhs[0], nil); ok {
						units[id.Name] = u
					}
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			typ, ok := map[string]string{
				"Int64Counter": "counter", "Float64Counter": "counter",
				"Int64UpDownCounter": "gauge", "Float64UpDownCounter": "gauge", "Int64Gauge": "gauge", "Float64Gauge": "gauge",
				"Int64Histogram": "histogram", "Float64Histogram": "histogram",
			}[sel.Sel.Name]
			lit, isLit := call.Args[0].(*ast.BasicLit)
			if !ok || !isLit || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			name = strings.ReplaceAll(name, ".", "_")
			for _, a := range call.Args[1:] {
				if u, ok := unitOf(a, units); ok && u == "s" {
					name += "_seconds"
				}
			}
			if typ == "counter" {
				name += "_total"
			}
			out[name] = typ
			return true
		})
	}
	if len(out) == 0 {
		t.Fatalf("found no instruments in %v", files)
	}
	return out
}

// unitOf returns the unit that e, metric.WithUnit("...") or a variable set
// to it, gives.
func unitOf(e ast.Expr, vars map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		u, ok := vars[e.Name]
		return u, ok
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "WithUnit" && len(e.Args) == 1 {
			if lit, ok := e.Args[0].(*ast.BasicLit); ok {
				u, err := strconv.Unquote(lit.Value)
				return u, err == nil
			}
		}
	}
	return "", false
}

// The example's /metrics has the metrics of extra/redfenceotel, under the
// names the OpenTelemetry Prometheus exporter gives them, so that one
// dashboard or alert serves both.
func TestMetricNamesAreRedfenceotels(t *testing.T) {
	var b strings.Builder
	if err := newMetrics().write(&b); err != nil {
		t.Fatal(err)
	}
	ours := parseExposition(t, strings.NewReader(b.String())).types
	otel := otelInstruments(t)
	if !maps.Equal(ours, otel) {
		t.Errorf("metric families differ:\n  example:       %v\n  redfenceotel:  %v", sorted(ours), sorted(otel))
	}
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+" "+v)
	}
	slices.Sort(out)
	return out
}
