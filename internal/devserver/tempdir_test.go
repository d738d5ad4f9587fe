package devserver

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A sweep removes the directories whose lock is free, or that have no lock
// file and are old; it keeps those whose lock is held and new ones without a
// lock file, which may be being created.
func TestSweepStale(t *testing.T) {
	root := t.TempDir()
	mk := func(name string) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	free := mk("rf-redis-free")
	if err := os.WriteFile(filepath.Join(free, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	held := mk("rf-redis-held")
	lock, err := createLock(held)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	fresh := mk("rf-redis-fresh")
	old := mk("rf-redis-old")
	long := time.Now().Add(-2 * unlockedGrace)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	other := mk("rf-mariadb-free")
	if err := os.WriteFile(filepath.Join(other, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	removed := sweepStale(root, "rf-redis-")
	slices.Sort(removed)
	if want := []string{free, old}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, d := range []string{held, fresh, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// A program killed with SIGKILL cannot stop its servers or remove their
// directories: the kernel kills the servers with it (Pdeathsig), and the
// next start of a server of the same kind removes the directory.
func TestKilledProgramLeavesNothingForLong(t *testing.T) {
	for _, which := range []string{"redis", "mariadb"} {
		t.Run(which, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), holdEnv+"="+which)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			var dir string
			line, err := bufio.NewReader(out).ReadString('\n')
			if _, serr := fmt.Sscanf(line, "%d %s", &pid, &dir); err != nil || serr != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the holding program printed %q (%v)", line, err)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			waitGone(t, pid)
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("the killed program's directory is already gone (%v): nothing to test", err)
			}

			var p *Process
			if which == "mariadb" {
				p, err = StartMariaDB(testCtx(t), MariaDBOptions{})
			} else {
				p, err = StartRedis(testCtx(t), RedisOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the next start left %s (%v)", dir, err)
			}
			if _, err := os.Stat(p.Dir); err != nil {
				t.Errorf("the new server's directory: %v", err)
			}
		})
	}
}

// waitGone waits until process pid no longer runs (the kernel kills it
// when the program that started it dies), and fails after 10s.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A zombie counts as gone: it is the reaper's to collect.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || isZombie(b) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %d still runs 10s after the program that started it was killed", pid)
		}
		time.Sleep(10 * time.Millisecond) // polling a process of another parent
	}
}

func isZombie(stat []byte) bool {
	// The state follows the command name in parentheses.
	i := len(stat) - 1
	for i >= 0 && stat[i] != ')' {
		i--
	}
	return i+2 < len(stat) && stat[i+2] == 'Z'
}
