package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redfence/redfence/migrations"
)

// The built binary runs, prints JSON and exits with the documented statuses.
func TestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "redfence")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	e := newEnv(t)
	out, err := exec.Command(bin, "migrate", "version", "-json", "-mysql-dsn", e.dsn).Output()
	if err != nil {
		t.Fatalf("migrate version: %v", err)
	}
	var v migrateJSON
	if err := json.Unmarshal(out, &v); err != nil || v.Version != migrations.Latest() || v.Database != e.database {
		t.Fatalf("migrate version printed %s (%v)", out, err)
	}

	cmd := exec.Command(bin, "inspect", "k", "-redis-addr", closedAddr(t), "-mysql-dsn", e.dsn)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitUnreachable || !strings.Contains(stderr.String(), "does not answer") ||
		strings.Contains(stderr.String(), "pool.go") {
		t.Fatalf("inspect with Redis down: %v, stderr:\n%s", err, stderr.String())
	}
}
