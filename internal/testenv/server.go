package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/devserver"
)

// Server is a redis-server process started by a test on a loopback port.
type Server struct {
	Addr string // host:port the server listens on
	Port int
	Dir  string // working directory (logs, nothing persisted unless asked)

	t testing.TB
	p *devserver.Process
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := devserver.FreePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return port
}

// RedisServer starts a redis-server on a free loopback port with persistence
// off, plus any extra arguments ("--replicaof", "127.0.0.1 6380", ...). It
// waits until the server answers PING and stops it (SIGKILL) when the test
// ends. It fails the test if redis-server is not installed.
func RedisServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := devserver.LookRedis()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := devserver.StartRedis(ctx, devserver.RedisOptions{Bin: bin, Dir: t.TempDir(), Args: extra})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	// Registered after t.TempDir, so it runs first: the directory is removed
	// once the server is gone.
	t.Cleanup(p.Kill)
	return &Server{Addr: p.Addr, Port: p.Port, Dir: p.Dir, t: t, p: p}
}

// Client returns a new client for this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it to
// exit. It is safe to call more than once.
func (s *Server) Kill() { s.p.Kill() }

// Pause stops the server process with SIGSTOP; Resume continues it.
func (s *Server) Pause() {
	if err := s.p.Pause(); err != nil {
		s.t.Errorf("testenv: pause redis-server on %s: %v", s.Addr, err)
	}
}

// Resume continues a server stopped with Pause.
func (s *Server) Resume() {
	if err := s.p.Resume(); err != nil {
		s.t.Errorf("testenv: resume redis-server on %s: %v", s.Addr, err)
	}
}

// Restart kills the server and starts it again on the same port with the same
// arguments. Without persistence it comes back empty.
func (s *Server) Restart() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.p.Restart(ctx); err != nil {
		s.t.Fatalf("testenv: restart: %v", err)
	}
}
