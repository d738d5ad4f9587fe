package devserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Process is a server that this package started on a loopback port.
type Process struct {
	// Name is the server binary's name: "redis-server" or "mariadbd".
	Name string
	// Addr is the host:port the server listens on, on 127.0.0.1.
	Addr string
	// Port is Addr's port.
	Port int
	// Dir holds the server's files: data, log, socket.
	Dir string

	spec spec
	own  *tempDir // Dir, when the Start function created it; Close removes it

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited and been reaped
}

// spec is how to run one kind of server.
type spec struct {
	bin          string
	args         func(port int) []string
	ready        func(ctx context.Context, addr string) error // nil once the server serves
	readyTimeout time.Duration
	logPath      string // quoted in the error when the server does not start
}

// errExited says the server process ended before it answered.
var errExited = errors.New("process exited")

// Attempts at binding a fresh port before giving up.
const portAttempts = 5

// start runs the server and waits until it answers. Unless samePort, each
// attempt takes a new free port, so a port taken in the meantime by another
// program costs an attempt rather than the start.
func (p *Process) start(ctx context.Context, samePort bool) error {
	var lastErr error
	for range portAttempts {
		if !samePort {
			port, err := FreePort()
			if err != nil {
				return err
			}
			p.Port = port
		}
		p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port))
		cmd := exec.Command(p.spec.bin, p.spec.args(p.Port)...)
		cmd.Dir = p.Dir
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("devserver: start %s: %w", p.Name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		p.mu.Lock()
		p.cmd, p.done = cmd, done
		p.mu.Unlock()
		lastErr = p.waitReady(ctx, done)
		if lastErr == nil {
			return nil
		}
		p.Kill()
		if samePort || !errors.Is(lastErr, errExited) || ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("devserver: %s on %s did not become ready: %w%s", p.Name, p.Addr, lastErr, logTail(p.spec.logPath))
}

// waitReady polls the server until it answers, exits, or the ready timeout
// or ctx ends.
func (p *Process) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, p.spec.readyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, acancel := context.WithTimeout(ctx, 250*time.Millisecond)
		err := p.spec.ready(actx, p.Addr)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %v", errExited, err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last try: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Pid returns the server's process id, or 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill stops the server with SIGKILL, as a crash would, together with
// anything it started, and waits until it has exited. It is safe to call more
// than once and on a server that has exited by itself.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	killGroup(cmd.Process)
	<-done
}

// Close kills the server and removes Dir when the Start function created it.
func (p *Process) Close() error {
	p.Kill()
	if p.own == nil {
		return nil
	}
	if err := p.own.remove(); err != nil {
		return fmt.Errorf("devserver: remove %s's directory: %w", p.Name, err)
	}
	return nil
}

// Restart kills the server and starts it again on the same port, with the
// same arguments and directory, and waits until it answers.
func (p *Process) Restart(ctx context.Context) error {
	p.Kill()
	return p.start(ctx, true)
}

// Pause stops the server with SIGSTOP, as a long stop-the-world pause would;
// Resume continues it.
func (p *Process) Pause() error { return p.signal(sigStop) }

// Resume continues a server stopped with Pause.
func (p *Process) Resume() error { return p.signal(sigCont) }

func (p *Process) signal(sig os.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil || sig == nil {
		return fmt.Errorf("devserver: %s: cannot signal the process", p.Name)
	}
	return cmd.Process.Signal(sig)
}

// newDir returns dir, or a new temporary directory, locked (see tempDir),
// after removing those that programs killed before they could remove them
// left behind.
func newDir(dir, pattern string) (path string, own *tempDir, err error) {
	if dir != "" {
		return dir, nil, nil
	}
	d, err := newTempDir(pattern)
	if err != nil {
		return "", nil, err
	}
	return d.path, d, nil
}

// logTail formats the end of the server's log for an error message.
func logTail(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	const max = 2000
	s := string(b)
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return "\n--- end of " + path + " ---\n" + strings.TrimRight(s, "\n")
}
