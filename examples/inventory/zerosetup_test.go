package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// smallGuardRun are demo flags for a run of a few seconds in guard mode.
var smallGuardRun = []string{"-mode", "guard", "-buyers", "8", "-instances", "2", "-stock", "20", "-orders", "4",
	"-pause", "0", "-failover=false"}

// spyLauncher offers every way of starting servers and fails the test if
// one is used.
func spyLauncher(t *testing.T) launcher {
	w := way{name: "spy", available: func() error { return nil }, start: func(context.Context) (*ownServer, error) {
		t.Error("a server was started")
		return nil, errors.New("not allowed in this test")
	}}
	return launcher{redis: []way{w}, mysql: []way{w}}
}

// TestCredentialsAndSettingsAreNotDown: refused credentials and settings
// that do not parse are reported as such, never as a server being down, and
// never make the program start servers of its own, even when the other
// server is down.
func TestCredentialsAndSettingsAreNotDown(t *testing.T) {
	srv := testServers(t)
	locked := testenv.RedisServer(t, "--requirepass", "sekrit")
	cfgDSN := strings.Replace(testenv.MySQLDSN(), "root@", "root:wrong-password@", 1)
	if cfgDSN == testenv.MySQLDSN() {
		t.Fatalf("cannot give a password to %q", cfgDSN)
	}
	deadMySQL := "root@tcp(" + closedAddr(t) + ")/"
	cases := []struct {
		name, redis, dsn string
		code             int // 1 when a server refused, 2 for a setting that does not parse
		want             []string
	}{
		{"MySQL wrong password", srv.redisAddr, cfgDSN, 1,
			[]string{"MySQL at", "refused the credentials", "Error 1045", "fix the user and password in MYSQL_DSN"}},
		{"Redis NOAUTH", locked.Addr, srv.mysqlDSN, 1,
			[]string{"Redis at " + locked.Addr + " refused the credentials", "NOAUTH", "REDIS_ADDR='redis://"}},
		{"Redis WRONGPASS", "redis://:nope@" + locked.Addr, srv.mysqlDSN, 1,
			[]string{"Redis at " + locked.Addr + " refused the credentials", "WRONGPASS"}},
		{"malformed DSN", srv.redisAddr, "not a dsn", 2, []string{"MYSQL_DSN is not a valid DSN"}},
		{"malformed REDIS_ADDR", "localhost", srv.mysqlDSN, 2, []string{"REDIS_ADDR is neither host:port nor a redis:// URL"}},
		{"Redis NOAUTH, MySQL down", locked.Addr, deadMySQL, 1,
			[]string{"Redis at " + locked.Addr + " refused the credentials", "cannot reach MySQL at"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("REDIS_ADDR", c.redis)
			t.Setenv("MYSQL_DSN", c.dsn)
			for _, args := range [][]string{smallGuardRun, {"serve", "-addr", "127.0.0.1:0"}} {
				var stdout, stderr strings.Builder
				code := runWith(testCtx(t), spyLauncher(t), args, &stdout, &stderr)
				out := stderr.String()
				if code != c.code {
					t.Fatalf("%s: exit status %d, want %d; stderr:\n%s", args[0], code, c.code, out)
				}
				for _, w := range append(c.want, "nothing was started") {
					if !strings.Contains(out, w) {
						t.Errorf("%s: stderr does not say %q:\n%s", args[0], w, out)
					}
				}
				if c.name != "Redis NOAUTH, MySQL down" && strings.Contains(out, "cannot reach") {
					t.Errorf("%s: reported as down:\n%s", args[0], out)
				}
				assertNoStackTrace(t, out)
			}
		})
	}
}

// TestContainerWhenNotInstalled: with redis-server missing, the one server
// that does not answer (Redis) comes from the next way, a container here
// played by the shared Redis, and is removed at the end; MySQL, which
// answers, is used as configured.
func TestContainerWhenNotInstalled(t *testing.T) {
	srv := testServers(t)
	t.Setenv("REDIS_ADDR", closedAddr(t))
	var started, closed atomic.Int32
	l := spyLauncher(t)
	l.redis = []way{
		{name: "redis-server", available: func() error { return errors.New("redis-server is not installed") }},
		{name: "a Redis container", available: func() error { return nil }, start: func(context.Context) (*ownServer, error) {
			started.Add(1)
			return &ownServer{addr: srv.redisAddr, desc: "a test container", gone: "removed a test container",
				close: func() error { closed.Add(1); return nil }}, nil
		}},
	}
	var stdout, stderr strings.Builder
	code := runWith(testCtx(t), l, append([]string{"-redis-prefix", testenv.Prefix(t)}, smallGuardRun...), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if started.Load() != 1 || closed.Load() != 1 {
		t.Errorf("container started %d and removed %d times, want 1 and 1", started.Load(), closed.Load())
	}
	for _, w := range []string{"starting Redis (a Redis container)", "started Redis (a test container)", "removed a test container"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
		}
	}
	if !strings.Contains(stdout.String(), "servers: Redis at "+srv.redisAddr+" (a test container), MySQL at ") {
		t.Errorf("the report does not say where it ran:\n%s", stdout.String())
	}
}

// Lines the program prints about the servers it starts.
var (
	startedRe = regexp.MustCompile(`started (Redis|MySQL) \((redis-server|mariadbd) started by this run, pid (\d+), files in (\S+)\)`)
	serversRe = regexp.MustCompile(`servers: Redis at (\S+) \(redis-server started by this run[^)]*\), MySQL at (\S+) \(mariadbd started by this run`)
)

// ownServers are the servers a run says it started.
type ownServers struct {
	pids  []int
	dirs  []string
	addrs []string
}

func parseStarted(t *testing.T, stderr string) ownServers {
	t.Helper()
	var o ownServers
	for _, m := range startedRe.FindAllStringSubmatch(stderr, -1) {
		pid, _ := strconv.Atoi(m[3])
		o.pids = append(o.pids, pid)
		o.dirs = append(o.dirs, m[4])
	}
	if len(o.pids) != 2 {
		t.Fatalf("stderr does not say that redis-server and mariadbd were started:\n%s", stderr)
	}
	return o
}

// assertLeftNothing checks that the servers a run started are gone: no
// process, no listener, no file in tmp, no process using tmp.
func assertLeftNothing(t *testing.T, o ownServers, tmp string) {
	t.Helper()
	for _, pid := range o.pids {
		// Dead and reaped: a zombie would still have /proc/pid.
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("process %d still exists", pid)
		}
	}
	for _, a := range o.addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			_ = c.Close()
			t.Errorf("%s still accepts connections", a)
		}
	}
	for _, d := range o.dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", d, err)
		}
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Errorf("left in TMPDIR: %v %v", left, err)
	}
	if ps := procsUsing(t, tmp); len(ps) > 0 {
		t.Errorf("processes still using %s: %v", tmp, ps)
	}
}

// procsUsing lists the processes whose command line mentions dir.
func procsUsing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), dir) {
			out = append(out, e.Name())
		}
	}
	return out
}

// childPids lists this process's children.
func childPids(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	me := strconv.Itoa(os.Getpid())
	out := map[string]bool{}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state ppid ...
		if len(f) > 1 && f[1] == me {
			out[e.Name()] = true
		}
	}
	return out
}

// TestZeroSetup runs the demo as a newcomer would, with nothing answering
// where REDIS_ADDR and MYSQL_DSN point: it starts redis-server and mariadbd
// itself, says so, sells exactly the stock in guard mode, and leaves nothing
// behind.
func TestZeroSetup(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	deadRedis, deadMySQL := closedAddr(t), closedAddr(t)
	t.Setenv("REDIS_ADDR", deadRedis)
	t.Setenv("MYSQL_DSN", "root@tcp("+deadMySQL+")/")
	before := childPids(t)

	var stdout, stderr strings.Builder
	code := run(testCtx(t), smallGuardRun, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	errOut, out := stderr.String(), stdout.String()
	for _, w := range []string{"nothing answers at " + deadRedis + " (Redis) and " + deadMySQL + " (MySQL)",
		"starting Redis (redis-server) and MySQL (mariadbd)", "stopped redis-server", "stopped mariadbd"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	o := parseStarted(t, errOut)
	m := serversRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the report does not say it ran on servers it started:\n%s", out)
	}
	o.addrs = m[1:]
	if strings.Contains(out, deadRedis) || strings.Contains(out, deadMySQL) {
		t.Errorf("the report names the configured servers:\n%s", out)
	}
	for _, w := range []string{"guard:     never oversold: 20 orders for 20 units, final stock 0 = 20 - 20", "result: PASS"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	assertLeftNothing(t, o, tmp)
	for pid := range childPids(t) {
		if !before[pid] {
			t.Errorf("child process %s left", pid)
		}
	}
}

// startProgram runs the test binary as the program (see TestMain) with
// args and env, and returns it with a channel of its stderr lines, closed
// at EOF.
func startProgram(t *testing.T, env []string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, lines
}

// TestSignalRemovesStartedServers: SIGINT (Ctrl-C) or SIGTERM while the
// demo runs on servers it started stops them and removes their files
// before the program exits.
func TestSignalRemovesStartedServers(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp := t.TempDir()
			env := []string{"TMPDIR=" + tmp, "REDIS_ADDR=" + closedAddr(t), "MYSQL_DSN=root@tcp(" + closedAddr(t) + ")/"}
			// Enough demand to run until the signal.
			cmd, lines := startProgram(t, env, "-mode", "guard", "-buyers", "4", "-instances", "1",
				"-stock", "1000000", "-orders", "1000000", "-pause", "0", "-failover=false")
			var all strings.Builder
			timeout := time.After(60 * time.Second)
			for seen := 0; seen < 2; {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("the program ended before starting its servers:\n%s", all.String())
					}
					all.WriteString(l + "\n")
					if startedRe.MatchString(l) {
						seen++
					}
				case <-timeout:
					t.Fatalf("the servers were not started within 60s:\n%s", all.String())
				}
			}
			o := parseStarted(t, all.String())
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			for l := range lines { // until the program closes stderr
				all.WriteString(l + "\n")
			}
			err := cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != exitFailed {
				t.Errorf("exit after %v: %v, want status %d", sig, err, exitFailed)
			}
			for _, w := range []string{"inventory: interrupted", "stopped redis-server", "stopped mariadbd"} {
				if !strings.Contains(all.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, all.String())
				}
			}
			assertLeftNothing(t, o, tmp)
		})
	}
}
