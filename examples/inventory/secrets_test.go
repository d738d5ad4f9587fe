package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/internal/testenv"
)

// passwordServers returns srv reached with passwords: the shared Redis
// through a URL with a password (its default user takes any), and the
// test's database as a user of the test's own with a password. It points
// REDIS_ADDR and MYSQL_DSN at them and returns the two passwords.
func passwordServers(t *testing.T, srv servers) (servers, []string) {
	t.Helper()
	db, err := sqlx.Open("mysql", srv.mysqlDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	user, password := "rf_"+testenv.RandomHex(6), "pw-"+testenv.RandomHex(8)
	testenv.MustExec(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+password+"'")
	t.Cleanup(func() { testenv.MustExec(t, db, "DROP USER '"+user+"'@'%'") })
	testenv.MustExec(t, db, "GRANT ALL ON `"+srv.database+"`.* TO '"+user+"'@'%'")
	cfg, err := mysql.ParseDSN(srv.mysqlDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, password
	redisPassword := "redis-" + password
	srv.redisAddr, srv.mysqlDSN = "redis://:"+redisPassword+"@"+srv.redisAddr, cfg.FormatDSN()
	t.Setenv("REDIS_ADDR", srv.redisAddr)
	t.Setenv("MYSQL_DSN", srv.mysqlDSN)
	return srv, []string{password, redisPassword}
}

func assertNoSecret(t *testing.T, what, out string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%s shows the password %q:\n%s", what, s, out)
		}
	}
}

// The demo's report and serve's start-up lines say where the servers are,
// without their passwords; so do its logs.
func TestReportAndServeMaskPasswords(t *testing.T) {
	srv := testServers(t)
	host := srv.redisAddr
	_, secrets := passwordServers(t, srv)
	var stdout, stderr strings.Builder
	code := run(testCtx(t), append([]string{"-redis-prefix", testenv.Prefix(t)}, smallGuardRun...), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if want := "servers: Redis at " + host + ", MySQL at "; !strings.Contains(stdout.String(), want) {
		t.Errorf("the report lacks %q:\n%s", want, stdout.String())
	}
	assertNoSecret(t, "the report", stdout.String()+stderr.String(), secrets)

	ctx, stop := context.WithCancel(testCtx(t))
	pr, pw := io.Pipe()
	var serveErr strings.Builder
	code2 := make(chan int, 1)
	go func() {
		defer pw.Close()
		code2 <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-redis-prefix", testenv.Prefix(t)}, pw, &serveErr)
	}()
	var serveOut strings.Builder
	base := listeningOn(t, io.TeeReader(pr, &serveOut))
	stop()
	_, _ = io.Copy(&serveOut, pr)
	if c := <-code2; base == "" || c != exitOK {
		t.Fatalf("serve: exit %d, listening on %q\nstdout:\n%s\nstderr:\n%s", c, base, serveOut.String(), serveErr.String())
	}
	if !strings.Contains(serveOut.String(), "servers: Redis at "+host) {
		t.Errorf("serve does not say where its servers are:\n%s", serveOut.String())
	}
	assertNoSecret(t, "serve", serveOut.String()+serveErr.String(), secrets)
}

// Errors about the servers name them without the passwords of the settings:
// settings that do not parse (whose parsers quote them), servers that do not
// answer, and refused credentials; for the demo and for serve.
func TestErrorsMaskPasswords(t *testing.T) {
	srv, secrets := passwordServers(t, testServers(t))
	cfg, _ := mysql.ParseDSN(srv.mysqlDSN)
	wrong := cfg.Clone()
	wrong.Passwd = "wrong-" + testenv.RandomHex(8)
	dead := cfg.Clone()
	dead.Addr = closedAddr(t)
	secrets = append(secrets, wrong.Passwd)
	cases := []struct {
		name, redis, dsn, want string
		code                   int
	}{
		{"Redis URL that does not parse", "redis://:" + secrets[1] + "@127.0.0.1:abc", srv.mysqlDSN, "redis://:***@127.0.0.1:abc", exitUsage},
		{"DSN that does not parse", srv.redisAddr, "app:" + secrets[0] + "@tcp(127.0.0.1:3306)/db?timeout=x", "MYSQL_DSN is not a valid DSN", exitUsage},
		{"servers down", "redis://:" + secrets[1] + "@" + closedAddr(t), dead.FormatDSN(), "cannot reach MySQL at " + dead.Addr, exitUnreachable},
		{"refused password", srv.redisAddr, wrong.FormatDSN(), "refused the credentials", exitFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("REDIS_ADDR", c.redis)
			t.Setenv("MYSQL_DSN", c.dsn)
			for _, args := range [][]string{smallGuardRun, {"serve", "-addr", "127.0.0.1:0"}} {
				var stdout, stderr strings.Builder
				code := runWith(testCtx(t), noWays(), args, &stdout, &stderr)
				out := stdout.String() + stderr.String()
				if code != c.code || !strings.Contains(out, c.want) {
					t.Fatalf("%s: exit %d, want %d and %q:\n%s", args[0], code, c.code, c.want, out)
				}
				assertNoSecret(t, args[0], out, secrets)
			}
			// The error itself, before anything prints it, is masked too.
			_, err := serversFromEnv(defaultDatabase)
			if err == nil {
				err = checkRedis(testCtx(t), servers{redisAddr: c.redis})
			}
			if err != nil {
				assertNoSecret(t, "the error", err.Error(), secrets)
			}
		})
	}
}
