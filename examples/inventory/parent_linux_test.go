package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestParentEndStopsTheDemo: the process that started the demo (go run's go
// command, played by a shell here) is killed, as a supervisor or timeout
// would end it: the demo stops as on SIGTERM, stopping the servers it
// started and removing their files, rather than running on orphaned.
func TestParentEndStopsTheDemo(t *testing.T) {
	tmp := t.TempDir()
	parent := exec.Command("sh", "-c", `"$0" "$@" & wait`, os.Args[0],
		"-mode", "guard", "-buyers", "4", "-instances", "1", "-stock", "1000000", "-orders", "1000000", "-pause", "0", "-failover=false")
	parent.Env = append(os.Environ(), runMainEnv+"=1", "TMPDIR="+tmp,
		"REDIS_ADDR="+closedAddr(t), "MYSQL_DSN=root@tcp("+closedAddr(t)+")/")
	// A pipe of the test's own: the one of StderrPipe is closed by Wait,
	// before the demo, which shares it, is done with it.
	stderr, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	parent.Stderr = w
	err = parent.Start()
	_ = w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if parent.ProcessState == nil {
			_ = parent.Process.Kill()
			_ = parent.Wait()
		}
	})
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var all strings.Builder
	timeout := time.After(60 * time.Second)
	for seen := 0; seen < 2; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended before starting its servers:\n%s", all.String())
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
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	// stderr reaches EOF once the demo, which shares it, has exited.
	done := time.After(60 * time.Second)
	for open := true; open; {
		select {
		case l, ok := <-lines:
			open = ok
			all.WriteString(l + "\n")
		case <-done:
			t.Fatalf("the demo still runs 60s after the process that started it was killed:\n%s", all.String())
		}
	}
	for _, w := range []string{"inventory: interrupted", "stopped redis-server", "stopped mariadbd"} {
		if !strings.Contains(all.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, all.String())
		}
	}
	assertLeftNothing(t, o, tmp)
}
