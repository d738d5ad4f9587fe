package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BuildHolder compiles the holder helper (cmd/holder) into dir and returns
// the path of the binary. It runs `go build` from the module's directory
// (the test's working directory).
func BuildHolder(dir string) (string, error) {
	bin := filepath.Join(dir, "holder")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/holder")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("chaos: go build ./cmd/holder: %v\n%s", err, out)
	}
	return bin, nil
}

// HolderConfig configures one holder process.
type HolderConfig struct {
	Redis         string        // address of Redis (or of a proxy in front of it)
	DSN           string        // MySQL DSN of the scenario's database
	Item          string        // item (and lock key) to buy
	Prefix        string        // redislock key prefix
	LeaseTTL      time.Duration // redislock lease
	WaiterTimeout time.Duration // redislock waiter timeout
	Recheck       time.Duration // redislock recheck interval
	// AtEnd runs the holder's Guard with HandOffAtEnd and NoRelay (the lock
	// held until the transaction ends) instead of the defaults.
	AtEnd bool
}

// Event is one line the holder wrote: a verb and its fields.
type Event struct {
	Verb   string
	Fields []string
}

// Holder is a running holder process. It buys on command (one operation at a
// time) and reports every step on its standard output.
type Holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	Events <-chan Event
	exited chan struct{}
}

// StartHolder starts the holder binary bin and waits for its "ready" line.
// The process is killed when the test ends.
func StartHolder(t testing.TB, bin string, cfg HolderConfig) *Holder {
	t.Helper()
	cmd := exec.Command(bin,
		"-redis", cfg.Redis, "-dsn", cfg.DSN, "-item", cfg.Item, "-prefix", cfg.Prefix,
		"-lease", cfg.LeaseTTL.String(), "-waiter-timeout", cfg.WaiterTimeout.String(), "-recheck", cfg.Recheck.String(),
		"-at-end="+strconv.FormatBool(cfg.AtEnd))
	cmd.Stderr = &prefixWriter{t: t}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("chaos: holder stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("chaos: holder stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("chaos: start holder: %v", err)
	}
	events := make(chan Event, 64)
	h := &Holder{cmd: cmd, stdin: stdin, Events: events, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) > 0 {
				events <- Event{Verb: f[0], Fields: f[1:]}
			}
		}
		close(events)
		_ = cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(h.Kill)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := h.Expect(ctx, "ready"); err != nil {
		t.Fatalf("chaos: holder did not start: %v", err)
	}
	return h
}

// Pid is the process id.
func (h *Holder) Pid() int { return h.cmd.Process.Pid }

// Send writes one command line to the holder.
func (h *Holder) Send(format string, args ...any) error {
	_, err := fmt.Fprintf(h.stdin, format+"\n", args...)
	return err
}

// Expect waits for the next event with the given verb, skipping others, and
// fails if the process exits or ctx ends first.
func (h *Holder) Expect(ctx context.Context, verb string) (Event, error) {
	for {
		select {
		case ev, ok := <-h.Events:
			if !ok {
				return Event{}, fmt.Errorf("chaos: holder %d exited while waiting for %q", h.Pid(), verb)
			}
			if ev.Verb == verb {
				return ev, nil
			}
		case <-ctx.Done():
			return Event{}, fmt.Errorf("chaos: holder %d: waiting for %q: %w", h.Pid(), verb, ctx.Err())
		}
	}
}

// Stop freezes the process (SIGSTOP); Continue resumes it (SIGCONT).
func (h *Holder) Stop() error { return h.cmd.Process.Signal(syscall.SIGSTOP) }

// Continue resumes a process frozen by Stop.
func (h *Holder) Continue() error { return h.cmd.Process.Signal(syscall.SIGCONT) }

// Kill sends SIGKILL (also to a stopped process) and waits until it is gone
// and its output is drained. Safe to call more than once.
func (h *Holder) Kill() {
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	for range h.Events { // drain, so that the reader can finish
	}
	<-h.exited
}

type prefixWriter struct{ t testing.TB }

func (w *prefixWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Logf("holder: %s", l)
	}
	return len(p), nil
}

// ParseOutcome reads an outcome name written by the holder.
func ParseOutcome(s string) Outcome {
	for i, n := range outcomeNames {
		if n == s {
			return Outcome(i)
		}
	}
	return Unknown
}
