package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started by a test on a loopback port.
type Server struct {
	Addr string // host:port the server listens on
	Port int
	Dir  string // working directory (logs, nothing persisted unless asked)

	t    testing.TB
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RedisServer starts a redis-server on a free loopback port with persistence
// off, plus any extra arguments ("--replicaof", "127.0.0.1 6380", ...). It
// waits until the server answers PING and stops it (SIGKILL) when the test
// ends. It fails the test if redis-server is not installed.
func RedisServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server is not on PATH (apt-get install redis-server): %v", err)
	}
	s := &Server{t: t, Dir: t.TempDir()}
	s.args = append([]string{bin}, extra...)
	s.start(t, false)
	t.Cleanup(func() { s.Kill() })
	return s
}

func (s *Server) start(t testing.TB, samePort bool) {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if !samePort {
			s.Port = FreePort(t)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		args := append([]string{}, s.args[1:]...)
		args = append(args, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", s.Dir,
			"--logfile", filepath.Join(s.Dir, "redis.log"), "--daemonize", "no")
		cmd := exec.Command(s.args[0], args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatalf("testenv: start redis-server: %v", err)
		}
		s.cmd = cmd
		s.done = make(chan struct{})
		go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
		if lastErr = s.waitReady(5 * time.Second); lastErr == nil {
			return
		}
		s.Kill()
		s.cmd = nil
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	t.Fatalf("testenv: redis-server on %s did not become ready: %v\n%s", s.Addr, lastErr, log)
}

func (s *Server) waitReady(d time.Duration) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("process exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a new client for this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it to
// exit. It is safe to call more than once.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Pause stops the server process with SIGSTOP; Resume continues it.
func (s *Server) Pause() { _ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP) }

// Resume continues a server stopped with Pause.
func (s *Server) Resume() { _ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT) }

// Restart kills the server and starts it again on the same port with the same
// arguments. Without persistence it comes back empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start(s.t, true)
}
