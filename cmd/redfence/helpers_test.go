package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{}) // the unreachable-server tests make go-redis log dial failures
	// After failed dials go-redis retries in a goroutine that notices a
	// closed pool only when its sleep ends.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// env is one test's servers: the shared Redis with a key prefix of the
// test's own, and a database of its own with the fence table.
type env struct {
	t        *testing.T
	rdb      *redis.Client
	prefix   string
	db       *sqlx.DB
	dsn      string // selects the test's database
	database string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, rdb: testenv.Redis(t), prefix: testenv.Prefix(t)}
	e.db, e.dsn = testenv.MySQLWithDSN(t)
	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	e.database = cfg.DBName
	if err := migrations.Apply(testCtx(t), e.db.DB); err != nil {
		t.Fatalf("migrations.Apply: %v", err)
	}
	return e
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// result is what one run of the program printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCLI runs the program in-process with args.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(testCtx(t), args, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// run runs the program against the test's servers: the connection flags
// follow args, as an operator appending them would write.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return runCLI(e.t, append(args, "-redis-addr", testenv.RedisAddr(), "-mysql-dsn", e.dsn)...)
}

// mustRun runs the program and fails the test unless it exits 0.
func (e *env) mustRun(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != exitOK {
		e.t.Fatalf("redfence %s: %v", strings.Join(args, " "), r)
	}
	return r
}

// decode parses r's stdout as exactly one JSON document into v, refusing
// unknown fields so that a renamed field fails the test.
func decode(t *testing.T, r result, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not the expected JSON: %v\n%v", err, r)
	}
	if dec.More() {
		t.Fatalf("more than one JSON document on stdout:\n%v", r)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
}
