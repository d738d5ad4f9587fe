package devserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// LookRedis returns the path of redis-server, or an error saying how to
// install it.
func LookRedis() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		// LookPath's error adds nothing a user can act on.
		return "", errors.New("devserver: redis-server is not installed, or not on PATH (apt-get install redis-server, brew install redis)")
	}
	return p, nil
}

// RedisOptions configures [StartRedis].
type RedisOptions struct {
	// Bin is the redis-server binary. default: [LookRedis]
	Bin string
	// Dir receives the log and anything the server writes; it must exist.
	// default: a new temporary directory, removed by [Process.Close]
	Dir string
	// Port to listen on. default: 0, a free port, with a new one tried when
	// another program takes it first
	Port int
	// Args are extra redis-server arguments ("--replicaof", "127.0.0.1 6380").
	// default: none
	Args []string
	// ReadyTimeout bounds the wait for the first PONG. default: 5s
	ReadyTimeout time.Duration
}

// StartRedis starts a redis-server listening on 127.0.0.1 only, with
// persistence off (RDB and AOF), and returns once it answers PING (or asks
// for a password first). ctx bounds
// the start; the server then runs until [Process.Kill] or [Process.Close].
func StartRedis(ctx context.Context, opt RedisOptions) (*Process, error) {
	if opt.Bin == "" {
		bin, err := LookRedis()
		if err != nil {
			return nil, err
		}
		opt.Bin = bin
	}
	if opt.ReadyTimeout <= 0 {
		opt.ReadyTimeout = 5 * time.Second
	}
	dir, own, err := newDir(opt.Dir, "rf-redis-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	p := &Process{Name: "redis-server", Dir: dir, Port: opt.Port, own: own, spec: spec{
		bin: opt.Bin,
		args: func(port int) []string {
			// The extra arguments come first so that the fixed ones below,
			// which keep the server private and throwaway, win.
			return append(append([]string{}, opt.Args...),
				"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--dir", dir,
				"--logfile", logPath, "--daemonize", "no")
		},
		ready:        pingRedis,
		readyTimeout: opt.ReadyTimeout,
		logPath:      logPath,
	}}
	if err := p.start(ctx, opt.Port != 0); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// pingRedis sends one inline PING and expects +PONG. It speaks the protocol
// itself so that polling a server that is still starting leaves no client
// pool or background dialer behind.
func pingRedis(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server started with --requirepass serves, but not before AUTH.
	line = strings.TrimSpace(line)
	if line != "+PONG" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
