package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
)

func TestMain(m *testing.M) {
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

// TestUnreachableServersAreExplained runs the program, demo and serve, with
// one server pointed at a closed port: it must say which server, how to start
// it and which variable to set, exit with status 2, and print no stack trace.
func TestUnreachableServersAreExplained(t *testing.T) {
	redisAddr := testenv.RedisAddr()
	_ = testenv.Redis(t)
	deadRedis := closedAddr(t)
	deadMySQL := closedAddr(t)
	cases := []struct {
		name, redis, dsn string
		args             []string
		want             []string
	}{
		{"demo, Redis down", deadRedis, testenv.MySQLDSN(), nil,
			[]string{"cannot reach Redis at " + deadRedis, "docker compose up -d", "REDIS_ADDR="}},
		{"demo, MySQL down", redisAddr, "root@tcp(" + deadMySQL + ")/", nil,
			[]string{"cannot reach MySQL at " + deadMySQL, "docker compose up -d", "MYSQL_DSN="}},
		{"serve, Redis down", deadRedis, testenv.MySQLDSN(), []string{"serve", "-addr", "127.0.0.1:0"},
			[]string{"cannot reach Redis at " + deadRedis, "docker compose up -d", "REDIS_ADDR="}},
		{"serve, MySQL down", redisAddr, "root@tcp(" + deadMySQL + ")/", []string{"serve", "-addr", "127.0.0.1:0"},
			[]string{"cannot reach MySQL at " + deadMySQL, "docker compose up -d", "MYSQL_DSN="}},
		{"invalid DSN", redisAddr, "not a dsn", nil, []string{"MYSQL_DSN is not a valid DSN"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("REDIS_ADDR", c.redis)
			t.Setenv("MYSQL_DSN", c.dsn)
			var stdout, stderr strings.Builder
			code := run(testCtx(t), c.args, &stdout, &stderr)
			if code != exitUnreachable {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitUnreachable, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr.String())
				}
			}
			for _, bad := range []string{"goroutine ", "panic", ".go:"} {
				if strings.Contains(stderr.String(), bad) {
					t.Errorf("stderr looks like a stack trace (%q):\n%s", bad, stderr.String())
				}
			}
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
		if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%q: exit status %d, want %d (stderr %q)", args, code, exitUsage, stderr.String())
		}
	}
	cfg, err := parseDemoFlags([]string{"-mode", "guard,unsafe"}, &strings.Builder{})
	if err != nil || len(cfg.modes) != 2 || cfg.modes[0] != modeGuard || cfg.modes[1] != modeUnsafe {
		t.Fatalf("mode list: %v %v", cfg.modes, err)
	}
	cfg, err = parseDemoFlags(nil, &strings.Builder{})
	if err != nil || len(cfg.modes) != 3 || cfg.buyers != 64 || cfg.pause <= cfg.lease {
		t.Fatalf("defaults: %+v %v (the default pause must outlast the lease)", cfg, err)
	}
}
