package main

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/internal/testenv"
)

// passwordDSN returns a DSN of e's database for a user of the test's own
// that has a password, and that password.
func (e *env) passwordDSN() (dsn, password string) {
	e.t.Helper()
	user, password := "rf_"+testenv.RandomHex(6), "pw-"+testenv.RandomHex(8)
	testenv.MustExec(e.t, e.db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+password+"'")
	e.t.Cleanup(func() { testenv.MustExec(e.t, e.db, "DROP USER '"+user+"'@'%'") })
	testenv.MustExec(e.t, e.db, "GRANT ALL ON `"+e.database+"`.* TO '"+user+"'@'%'")
	cfg, err := mysql.ParseDSN(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN(), password
}

// noSecret fails the test when r printed secret anywhere.
func noSecret(t *testing.T, r result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
			t.Fatalf("printed the password %q:\n%v", s, r)
		}
	}
}

// Flag help shows the defaults that REDIS_ADDR and MYSQL_DSN set with their
// passwords masked.
func TestHelpMasksPasswords(t *testing.T) {
	t.Setenv("REDIS_ADDR", "redis://app:redis-s3cret@127.0.0.1:6379/0")
	t.Setenv("MYSQL_DSN", "app:mysql-s3cret@tcp(127.0.0.1:3306)/")
	for _, cmd := range []string{"inspect", "migrate"} {
		r := runCLI(t, cmd, "-h")
		noSecret(t, r, "s3cret")
		for _, want := range []string{`(default "redis://app:***@127.0.0.1:6379/0")`, `(default "app:***@tcp(127.0.0.1:3306)/")`} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s -h lacks %s:\n%v", cmd, want, r)
			}
		}
	}
}

// Errors name the server and the setting, never its password: settings that
// do not parse (whose parsers quote them), servers that do not answer,
// refused credentials; in text and with -json.
func TestErrorsMaskPasswords(t *testing.T) {
	e := newEnv(t)
	good, password := e.passwordDSN()
	cfg, _ := mysql.ParseDSN(good)
	deadMySQL := cfg.Clone()
	deadMySQL.Addr = closedAddr(t)
	wrong := cfg.Clone()
	wrong.Passwd = "wrong-" + testenv.RandomHex(8)
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		msg  string
	}{
		{"Redis URL that does not parse", []string{"inspect", "k", "-redis-addr", "redis://:" + password + "@127.0.0.1:abc", "-mysql-dsn", good},
			nil, exitUsage, "redis://:***@127.0.0.1:abc"},
		{"Redis URL from the variable", []string{"inspect", "k", "-mysql-dsn", good},
			map[string]string{"REDIS_ADDR": "redis://:" + password + "@127.0.0.1:abc"}, exitUsage, "redis://:***@127.0.0.1:abc"},
		{"DSN that does not parse", []string{"migrate", "version", "-mysql-dsn", "app:" + password + "@tcp(127.0.0.1:3306)/db?timeout=x"},
			nil, exitUsage, "not a valid DSN"},
		{"Redis down", []string{"inspect", "k", "-redis-addr", "redis://:" + password + "@" + closedAddr(t), "-mysql-dsn", good},
			nil, exitUnreachable, "does not answer"},
		{"MySQL down", []string{"migrate", "version", "-mysql-dsn", deadMySQL.FormatDSN()}, nil, exitUnreachable, "does not answer"},
		{"wrong password", []string{"migrate", "version", "-mysql-dsn", wrong.FormatDSN()}, nil, exitFailed, "refused user"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			for _, args := range [][]string{tc.args, append([]string{tc.args[0], "-json"}, tc.args[1:]...)} {
				r := runCLI(t, args...)
				if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
					t.Fatalf("exit %d, want %d with %q:\n%v", r.code, tc.code, tc.msg, r)
				}
				noSecret(t, r, password, wrong.Passwd)
			}
		})
	}
}

// inspect and migrate, given settings with passwords that the servers
// accept, print their results without them.
func TestOutputMasksPasswords(t *testing.T) {
	e := newEnv(t)
	dsn, password := e.passwordDSN()
	// The local Redis's default user takes any password.
	redisURL := "redis://:redis-" + password + "@" + testenv.RedisAddr()
	t.Setenv("REDIS_ADDR", redisURL)
	t.Setenv("MYSQL_DSN", dsn)
	for _, args := range [][]string{
		{"inspect", "-prefix", e.prefix, "k"},
		{"inspect", "-prefix", e.prefix, "-json", "k"},
		{"migrate", "version"},
		{"migrate", "-json", "version"},
		{"inspect", "-prefix", e.prefix, "-redis-addr", redisURL, "-mysql-dsn", dsn, "k"},
	} {
		r := runCLI(t, args...)
		if r.code != exitOK {
			t.Fatalf("%v: %v", args, r)
		}
		noSecret(t, r, password)
	}
}
