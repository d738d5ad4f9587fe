package testenv

import (
	"context"
	"net"
	"os"
	"sync"
	"time"
)

// source says where the tests' server comes from.
type source int

const (
	// sourceEnv: the environment variable is set; it is used as given and
	// nothing is probed, even when it does not answer.
	sourceEnv source = iota
	// sourceDefault: something answers on the default loopback port.
	sourceDefault
	// sourceContainer: nothing answers and a Docker engine is reachable, so a
	// container is started with testcontainers-go.
	sourceContainer
	// sourceNone: no server and no engine; the default address is returned and
	// the test fails with instructions when it cannot connect.
	sourceNone
)

func (s source) String() string {
	switch s {
	case sourceEnv:
		return "environment"
	case sourceDefault:
		return "default port"
	case sourceContainer:
		return "container"
	default:
		return "none"
	}
}

// choose is the whole policy, kept free of I/O so it can be tested as a
// table. defaultAnswers and dockerAvailable are only consulted when needed,
// which is why they are functions: a set variable probes nothing, and an
// answering default port never contacts Docker.
func choose(envSet bool, defaultAnswers, dockerAvailable func() bool) source {
	switch {
	case envSet:
		return sourceEnv
	case defaultAnswers():
		return sourceDefault
	case dockerAvailable():
		return sourceContainer
	default:
		return sourceNone
	}
}

// resolver finds a server address once per test process. Its I/O is held in
// function fields so the resolution can be tested without servers or Docker.
type resolver struct {
	envVar      string
	defaultAddr string // returned by sourceDefault and sourceNone
	dialAddr    string // host:port probed to decide whether the default answers

	answers func(addr string) bool
	docker  func() error                                       // nil: an engine is reachable
	start   func(ctx context.Context) (addr string, err error) // the container path

	once   sync.Once
	addr   string
	src    source
	reason string // why the fallback failed, for the test's failure message
}

// get returns the address to use. The environment variable is read on every
// call (tests may set it with t.Setenv); the probing and any container start
// happen at most once.
func (r *resolver) get() string {
	if v := os.Getenv(r.envVar); v != "" {
		return v
	}
	r.once.Do(r.resolve)
	return r.addr
}

// note explains, for a failure message, what the fallback found; empty when
// there is nothing to add.
func (r *resolver) note() string {
	if os.Getenv(r.envVar) != "" {
		return ""
	}
	r.once.Do(r.resolve)
	return r.reason
}

func (r *resolver) resolve() {
	var dockerErr error
	r.src = choose(false,
		func() bool { return r.answers(r.dialAddr) },
		func() bool { dockerErr = r.docker(); return dockerErr == nil })
	r.addr = r.defaultAddr
	switch r.src {
	case sourceNone:
		r.reason = "nothing answers on " + r.dialAddr + " and no Docker engine is reachable for testcontainers-go (" +
			errString(dockerErr) + ")"
	case sourceContainer:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		addr, err := r.start(ctx)
		if err != nil {
			r.reason = "nothing answers on " + r.dialAddr + " and starting a container failed: " + err.Error()
			return
		}
		r.addr = addr
	}
}

// noteSuffix formats r's note for the end of a failure message.
func noteSuffix(r *resolver) string {
	if n := r.note(); n != "" {
		return "; " + n
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "unknown reason"
	}
	return err.Error()
}

// tcpAnswers reports whether a TCP connection to addr opens quickly.
func tcpAnswers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// The two resolvers of the process. They are package state because the
// servers they find (possibly containers) are shared by every test of the
// process, like the servers named by the environment.
var (
	redisResolver = &resolver{
		envVar:      "REDIS_ADDR",
		defaultAddr: DefaultRedisAddr,
		dialAddr:    DefaultRedisAddr,
		answers:     tcpAnswers,
		docker:      dockerAvailable,
		start:       startRedisContainer,
	}
	mysqlResolver = &resolver{
		envVar:      "MYSQL_DSN",
		defaultAddr: DefaultMySQLDSN,
		dialAddr:    "127.0.0.1:3306",
		answers:     tcpAnswers,
		docker:      dockerAvailable,
		start:       startMySQLContainer,
	}
)
