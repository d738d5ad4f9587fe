package main

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
)

// runMainEnv, set to 1, makes the test binary run the program itself (see
// startProgram), so that tests can signal a real process.
const runMainEnv = "INVENTORY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main() // exits
	}
	redis.SetLogger(quietRedis{}) // the dependency-down tests make go-redis log dial failures
	// After failed dials go-redis retries in a goroutine that notices a
	// closed pool only when its 1 s sleep ends.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// testServers returns the shared Redis and a private database of the test,
// and points REDIS_ADDR and MYSQL_DSN at them for code that reads the
// environment.
func testServers(t *testing.T) servers {
	t.Helper()
	_ = testenv.Redis(t) // fails loudly when Redis is down
	_, dsn := testenv.MySQLWithDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("REDIS_ADDR", testenv.RedisAddr())
	t.Setenv("MYSQL_DSN", dsn)
	return servers{redisAddr: testenv.RedisAddr(), mysqlDSN: dsn, database: cfg.DBName}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
}

// noWays is a launcher for a machine with no server installed and no
// Docker engine.
func noWays() launcher {
	no := func(msg string) way {
		return way{name: msg, available: func() error { return errors.New(msg) },
			start: func(context.Context) (*ownServer, error) { panic("started a server that is not available") }}
	}
	return launcher{
		redis: []way{no("redis-server is not installed"), no("no Docker engine answers")},
		mysql: []way{no("mariadbd is not installed"), no("no Docker engine answers")},
	}
}

// assertNoStackTrace fails when out looks like a crash rather than a message.
func assertNoStackTrace(t *testing.T, out string) {
	t.Helper()
	for _, bad := range []string{"goroutine ", "panic", ".go:"} {
		if strings.Contains(out, bad) {
			t.Errorf("stderr looks like a stack trace (%q):\n%s", bad, out)
		}
	}
}

// TestMissingServersAreNamedTogether runs the program, demo and serve, where
// nothing answers and nothing can be started: within 2 s it must name every
// missing server in one message, with why none could be started and the
// three ways out, exit with status 2, and print no stack trace.
func TestMissingServersAreNamedTogether(t *testing.T) {
	redisAddr := testenv.RedisAddr()
	_ = testenv.Redis(t)
	deadRedis := closedAddr(t)
	deadMySQL := closedAddr(t)
	waysOut := []string{"docker compose up -d", "REDIS_ADDR=", "MYSQL_DSN=", "apt-get install redis-server mariadb-server"}
	cases := []struct {
		name, redis, dsn string
		args             []string
		want, notWant    []string
	}{
		{"demo, both down", deadRedis, "root@tcp(" + deadMySQL + ")/", nil,
			[]string{"cannot reach Redis at " + deadRedis, "cannot reach MySQL at " + deadMySQL,
				"redis-server is not installed", "mariadbd is not installed", "no Docker engine answers"}, nil},
		{"serve, both down", deadRedis, "root@tcp(" + deadMySQL + ")/", []string{"serve", "-addr", "127.0.0.1:0"},
			[]string{"cannot reach Redis at " + deadRedis, "cannot reach MySQL at " + deadMySQL}, nil},
		{"demo, Redis down", deadRedis, testenv.MySQLDSN(), nil,
			[]string{"cannot reach Redis at " + deadRedis, "redis-server is not installed"}, []string{"MySQL at"}},
		{"serve, MySQL down", redisAddr, "root@tcp(" + deadMySQL + ")/", []string{"serve", "-addr", "127.0.0.1:0"},
			[]string{"cannot reach MySQL at " + deadMySQL, "mariadbd is not installed"}, []string{"Redis at"}},
		{"starting turned off", deadRedis, "root@tcp(" + deadMySQL + ")/", []string{"-start-servers=false"},
			[]string{"cannot reach Redis at " + deadRedis, "cannot reach MySQL at " + deadMySQL, "-start-servers=false"},
			[]string{"not installed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("REDIS_ADDR", c.redis)
			t.Setenv("MYSQL_DSN", c.dsn)
			var stdout, stderr strings.Builder
			start := time.Now()
			code := runWith(testCtx(t), noWays(), c.args, &stdout, &stderr)
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("answered after %v, want within 2s", took)
			}
			if code != 3 { // the status cmd/redfence gives a server that does not answer
				t.Fatalf("exit status %d, want 3; stderr:\n%s", code, stderr.String())
			}
			out := stderr.String()
			for _, w := range append(c.want, waysOut...) {
				if !strings.Contains(out, w) {
					t.Errorf("stderr does not say %q:\n%s", w, out)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(out, w) {
					t.Errorf("stderr says %q:\n%s", w, out)
				}
			}
			if n := strings.Count(out, "inventory: "); n != 1 {
				t.Errorf("%d messages, want one:\n%s", n, out)
			}
			assertNoStackTrace(t, out)
		})
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "optimistic"},
		{"-buyers", "0"},
		{"-lease", "1ms"},
		{"extra"},
	} {
		var stdout, stderr strings.Builder
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 { // cmd/redfence's usage status
			t.Errorf("%q: exit status %d, want 2 (stderr %q)", args, code, stderr.String())
		}
	}
	cfg, err := parseDemoFlags([]string{"-mode", "guard,unsafe"}, &strings.Builder{})
	if err != nil || len(cfg.modes) != 2 || cfg.modes[0] != modeGuard || cfg.modes[1] != modeUnsafe {
		t.Fatalf("mode list: %v %v", cfg.modes, err)
	}
	cfg, err = parseDemoFlags(nil, &strings.Builder{})
	if err != nil || len(cfg.modes) != len(allModes) || cfg.buyers != 64 || cfg.pause <= cfg.lease {
		t.Fatalf("defaults: %+v %v (the default pause must outlast the lease)", cfg, err)
	}
}

// An error that comes once the run was interrupted is the interruption's
// doing: a connection it cut reads as "bad connection", which must not be
// reported as the server answering with an error.
func TestFailAfterTheInterruptionSaysInterrupted(t *testing.T) {
	cut := &serversError{problems: []*serverProblem{mysqlProblem("127.0.0.1:3306", driver.ErrBadConn)}}
	ctx, cancel := context.WithCancel(context.Background())
	var live strings.Builder
	if code := fail(ctx, &live, cut); code != cut.exitCode() || !strings.Contains(live.String(), "answered with an error") {
		t.Fatalf("running: exit %d, %q; want %d and the server's error", code, live.String(), cut.exitCode())
	}
	cancel()
	var ended strings.Builder
	if code := fail(ctx, &ended, cut); code != exitFailed || ended.String() != "inventory: interrupted\n" {
		t.Fatalf("interrupted: exit %d, %q; want %d and \"inventory: interrupted\"", code, ended.String(), exitFailed)
	}
}
