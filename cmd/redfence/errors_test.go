package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// Bad usage, bad DSNs and servers that do not answer each get their own exit
// status and a message naming the cause and where the setting came from; with
// -json stdout holds one error document.
func TestErrorsAreNamed(t *testing.T) {
	_ = testenv.Redis(t)
	redisAddr := testenv.RedisAddr()
	_, dsn := testenv.MySQLWithDSN(t)
	deadRedis, deadMySQL := closedAddr(t), closedAddr(t)
	cases := []struct {
		name string
		env  map[string]string
		args []string
		code int
		msg  []string // all in stderr
	}{
		{name: "no command", args: nil, code: exitUsage, msg: []string{"usage:"}},
		{name: "unknown command", args: []string{"purge"}, code: exitUsage, msg: []string{`unknown command "purge"`}},
		{name: "unknown flag", args: []string{"inspect", "-bogus", "k"}, code: exitUsage, msg: []string{"-bogus"}},
		{name: "no key", args: []string{"inspect", "-mysql-dsn", dsn}, code: exitUsage, msg: []string{"one KEY, got 0"}},
		{name: "two keys", args: []string{"inspect", "a", "b", "-mysql-dsn", dsn}, code: exitUsage, msg: []string{"one KEY, got 2"}},
		{name: "empty key", args: []string{"inspect", "-mysql-dsn", dsn, "--", ""}, code: exitUsage, msg: []string{"invalid key"}},
		{name: "brace in prefix", args: []string{"inspect", "-prefix", "a{b", "k", "-mysql-dsn", dsn}, code: exitUsage, msg: []string{"invalid options"}},
		{name: "brace in namespace", args: []string{"inspect", "-namespace", "a}b", "k", "-mysql-dsn", dsn}, code: exitUsage, msg: []string{"-namespace"}},
		{name: "bad timeout", args: []string{"migrate", "version", "-timeout", "0s"}, code: exitUsage, msg: []string{"-timeout"}},
		{name: "unknown action", args: []string{"migrate", "sideways", "-mysql-dsn", dsn}, code: exitUsage, msg: []string{`"sideways"`}},
		{name: "bad DSN flag", args: []string{"migrate", "version", "-mysql-dsn", "not a dsn"}, code: exitUsage,
			msg: []string{"MySQL DSN from -mysql-dsn is not a valid DSN"}},
		{name: "bad DSN variable", env: map[string]string{"MYSQL_DSN": "root@tcp(127.0.0.1:3306)"}, args: []string{"migrate", "version"},
			code: exitUsage, msg: []string{"MySQL DSN from $MYSQL_DSN is not a valid DSN"}},
		{name: "DSN without database", args: []string{"migrate", "version", "-mysql-dsn", "root@tcp(127.0.0.1:3306)/"}, code: exitUsage,
			msg: []string{"no database selected", "-database"}},
		{name: "bad Redis URL", args: []string{"inspect", "k", "-redis-addr", "redis://x:y:z/abc", "-mysql-dsn", dsn}, code: exitUsage,
			msg: []string{"Redis address from -redis-addr is not a valid URL"}},
		{name: "Redis down (flag)", args: []string{"inspect", "k", "-redis-addr", deadRedis, "-mysql-dsn", dsn}, code: exitUnreachable,
			msg: []string{"Redis at " + deadRedis + " does not answer (set by -redis-addr)"}},
		{name: "Redis down (variable)", env: map[string]string{"REDIS_ADDR": deadRedis}, args: []string{"inspect", "k", "-mysql-dsn", dsn},
			code: exitUnreachable, msg: []string{"Redis at " + deadRedis + " does not answer (set by $REDIS_ADDR)"}},
		{name: "MySQL down", args: []string{"migrate", "version", "-mysql-dsn", "root@tcp(" + deadMySQL + ")/db"}, code: exitUnreachable,
			msg: []string{"MySQL at " + deadMySQL + " does not answer (set by -mysql-dsn)"}},
		{name: "MySQL down for inspect", args: []string{"inspect", "k", "-redis-addr", redisAddr, "-mysql-dsn", "root@tcp(" + deadMySQL + ")/db"},
			code: exitUnreachable, msg: []string{"MySQL at " + deadMySQL + " does not answer"}},
		{name: "unknown database", args: []string{"migrate", "version", "-mysql-dsn", dsn, "-database", "rftest_missing_" + testenv.RandomHex(4)},
			code: exitFailed, msg: []string{"does not exist"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("REDIS_ADDR", redisAddr)
			t.Setenv("MYSQL_DSN", dsn)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := runCLI(t, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%v", r.code, tc.code, r)
			}
			for _, m := range tc.msg {
				if !strings.Contains(r.stderr, m) {
					t.Errorf("stderr lacks %q\n%v", m, r)
				}
			}
			if strings.Contains(r.stderr, "goroutine ") || r.stdout != "" {
				t.Errorf("stack trace on stderr or output on stdout\n%v", r)
			}
			if len(tc.args) == 0 || tc.name == "unknown command" {
				return
			}
			var got errorJSON
			decode(t, runCLI(t, append([]string{tc.args[0], "-json"}, tc.args[1:]...)...), &got)
			if got.Error.ExitCode != tc.code || got.Error.Kind != kinds[tc.code] || !strings.Contains(got.Error.Message, strings.TrimPrefix(tc.msg[0], "-")) {
				t.Errorf("-json error %+v, want kind %s, status %d, message with %q", got.Error, kinds[tc.code], tc.code, tc.msg[0])
			}
		})
	}
}

// A Redis that accepts connections but never answers (a stopped process) is
// reported as not answering once -timeout has passed, not after it.
func TestHungRedisIsReportedWithinTimeout(t *testing.T) {
	_, dsn := testenv.MySQLWithDSN(t)
	srv := testenv.RedisServer(t)
	srv.Pause()
	t.Cleanup(srv.Resume)
	start := time.Now()
	r := runCLI(t, "inspect", "k", "-timeout", "500ms", "-redis-addr", srv.Addr, "-mysql-dsn", dsn)
	if r.code != exitUnreachable || !strings.Contains(r.stderr, "Redis at "+srv.Addr+" does not answer") {
		t.Fatalf("hung Redis: %v", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v with -timeout 500ms", d)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}} {
		if r := runCLI(t, args...); r.code != exitOK || !strings.Contains(r.stdout, "redfence inspect") {
			t.Errorf("%v: %v", args, r)
		}
	}
	if r := runCLI(t, "inspect", "-h"); r.code != exitOK || !strings.Contains(r.stderr, "-namespace") {
		t.Errorf("inspect -h: %v", r)
	}
}
