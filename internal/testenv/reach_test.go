package testenv

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// unreachableChildEnv makes TestUnreachableChild do its work; it is set only
// in the child process started by TestUnreachableServersFailFastAndOnce.
const unreachableChildEnv = "TESTENV_UNREACHABLE_CHILD"

// unreachableCalls is how many tests of the child need each server.
const unreachableCalls = 5

// TestUnreachableChild is the body of the child process of
// TestUnreachableServersFailFastAndOnce: tests that need servers which do not
// answer. Outside that child it has nothing to do.
func TestUnreachableChild(t *testing.T) {
	if os.Getenv(unreachableChildEnv) != "1" {
		return
	}
	for i := range unreachableCalls {
		t.Run("redis"+strconv.Itoa(i), func(t *testing.T) {
			_ = Prefix(t)
			_ = Redis(t)
		})
	}
	for i := range unreachableCalls {
		t.Run("mysql"+strconv.Itoa(i), func(t *testing.T) { _ = MySQL(t) })
	}
}

// With both servers down, every test that needs one fails (none skips), the
// first says once which variable to set, the others fail at once, and
// neither client prints its own dial retries.
func TestUnreachableServersFailFastAndOnce(t *testing.T) {
	const down = "127.0.0.1:1" // nothing listens on port 1
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnreachableChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), unreachableChildEnv+"=1",
		"REDIS_ADDR="+down, "MYSQL_DSN=root@tcp("+down+")/")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	text := string(out)
	if _, failed := err.(*exec.ExitError); !failed {
		t.Fatalf("child with both servers down: err=%v, want a failing exit status\n%s", err, text)
	}

	for _, v := range []string{"REDIS_ADDR", "MYSQL_DSN"} {
		if n := strings.Count(text, v+"="); n != 1 {
			t.Errorf("%s is named %d times, want once\n%s", v, n, text)
		}
	}
	for _, spam := range []string{"redis: ", "[mysql]", "connection pool"} {
		if strings.Contains(text, spam) {
			t.Errorf("the clients' own logging leaked (%q)\n%s", spam, text)
		}
	}
	if strings.Contains(text, "--- SKIP") {
		t.Errorf("a test skipped instead of failing\n%s", text)
	}

	// Every subtest failed; all but the first of each server at once.
	re := regexp.MustCompile(`--- FAIL: TestUnreachableChild/(redis|mysql)(\d+) \(([0-9.]+)s\)`)
	fails := re.FindAllStringSubmatch(text, -1)
	if len(fails) != 2*unreachableCalls {
		t.Fatalf("%d subtests failed, want %d\n%s", len(fails), 2*unreachableCalls, text)
	}
	for _, f := range fails {
		d, _ := strconv.ParseFloat(f[3], 64)
		if f[2] != "0" && d > 0.5 {
			t.Errorf("%s%s took %.2fs after the server was known down, want at once", f[1], f[2], d)
		}
	}
	if elapsed > 20*time.Second {
		t.Errorf("child took %v", elapsed)
	}
	t.Logf("child failed in %v", elapsed.Round(time.Millisecond))
}
