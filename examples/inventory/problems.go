package main

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/redact"
)

// problemKind says why a server cannot be used, which decides what the
// program may do about it.
type problemKind int

const (
	// problemDown: nothing answers. Only then does the program start a server
	// of its own.
	problemDown problemKind = iota
	// problemAuth: the server answers but refuses the credentials.
	problemAuth
	// problemConfig: REDIS_ADDR or MYSQL_DSN cannot be parsed.
	problemConfig
	// problemOther: the server answers with an error.
	problemOther
)

// serverProblem is why one server cannot be used.
type serverProblem struct {
	which string // "Redis" or "MySQL"
	addr  string // host:port, or the setting that does not parse with its password masked
	kind  problemKind
	err   error
	// setting is the REDIS_ADDR or MYSQL_DSN that does not parse, whose
	// password is masked where err quotes it (URL parsers do).
	setting string
}

func (p *serverProblem) Error() string {
	return redact.Text(p.message(), p.setting)
}

func (p *serverProblem) message() string {
	switch p.kind {
	case problemDown:
		return fmt.Sprintf("cannot reach %s at %s: %v", p.which, p.addr, oneLine(p.err))
	case problemAuth:
		return fmt.Sprintf("%s at %s refused the credentials: %v", p.which, p.addr, oneLine(p.err))
	case problemConfig:
		return oneLine(p.err)
	default:
		return fmt.Sprintf("%s at %s answered with an error: %v", p.which, p.addr, oneLine(p.err))
	}
}

func (p *serverProblem) Unwrap() error { return p.err }

// fix says how to correct a problem that is not a server being down.
func (p *serverProblem) fix() string {
	switch {
	case p.which == "Redis" && p.kind == problemAuth:
		return "give Redis's user and password in REDIS_ADDR as a URL, e.g.  REDIS_ADDR='redis://user:password@127.0.0.1:6379/0'"
	case p.which == "Redis":
		return "set REDIS_ADDR to host:port or a redis:// URL, e.g.  REDIS_ADDR=127.0.0.1:6379"
	case p.kind == problemAuth:
		return "fix the user and password in MYSQL_DSN, e.g.  MYSQL_DSN='user:password@tcp(127.0.0.1:3306)/'"
	default:
		return "set MYSQL_DSN to a go-sql-driver DSN, e.g.  MYSQL_DSN='user:password@tcp(127.0.0.1:3306)/'"
	}
}

// redisProblem classifies the error of a Redis PING.
func redisProblem(addr string, err error) *serverProblem {
	p := &serverProblem{which: "Redis", addr: addr, kind: problemOther, err: err}
	switch {
	case redis.IsAuthError(err) || hasPrefix(err, "NOAUTH", "WRONGPASS", "ERR AUTH", "ERR invalid password", "ERR Client sent AUTH"):
		p.kind = problemAuth
	case isDown(err):
		p.kind = problemDown
	}
	return p
}

// MySQL errors that mean the credentials were refused: access denied (1045),
// to the database (1044), root that may only log in over the Unix socket
// (1698), and an authentication method the client lacks (1251).
var mysqlAuthErrors = map[uint16]bool{1044: true, 1045: true, 1698: true, 1251: true}

// mysqlProblem classifies the error of a MySQL connection attempt.
func mysqlProblem(addr string, err error) *serverProblem {
	p := &serverProblem{which: "MySQL", addr: addr, kind: problemOther, err: err}
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && mysqlAuthErrors[me.Number]:
		p.kind = problemAuth
	case errors.Is(err, mysql.ErrNativePassword), errors.Is(err, mysql.ErrCleartextPassword),
		errors.Is(err, mysql.ErrOldPassword), errors.Is(err, mysql.ErrUnknownPlugin):
		p.kind = problemAuth
	case errors.As(err, &me):
		// The server answered.
	case isDown(err):
		p.kind = problemDown
	}
	return p
}

// isDown reports whether err says that nothing answered: refused, timed
// out, unresolvable or reset connections.
func isDown(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, errProbeTimeout)
}

func hasPrefix(err error, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// serversError is every reason the program cannot have its servers, with
// what to do about them. The program exits with the status of exitCode.
type serversError struct {
	problems []*serverProblem
	// notStarting says why no server was started for those that are down:
	// what is missing to start one here, or that starting is turned off.
	// Empty when starting was not considered.
	notStarting []string
	// startErr is the failure of an attempt to start servers.
	startErr error
}

// Ways out of servers that do not answer, given in full every time.
const waysOut = `three ways out:
  - point the demo at running servers:  REDIS_ADDR=host:6379 MYSQL_DSN='user:password@tcp(host:3306)/' go run ./examples/inventory
  - start them with Docker, from the repository root:  docker compose up -d
  - install them, and the demo starts throwaway ones by itself:  apt-get install redis-server mariadb-server  (macOS: brew install redis mariadb)`

func (e *serversError) Error() string {
	var b strings.Builder
	down := true
	for _, p := range e.problems {
		b.WriteString(p.Error())
		b.WriteByte('\n')
		if p.kind != problemDown {
			down = false
			b.WriteString("  " + p.fix() + "\n")
		}
	}
	if !down {
		// A server that answers is never replaced by one of the program's
		// own: the user meant that one.
		b.WriteString("nothing was started: fix the settings above")
		return b.String()
	}
	if e.startErr != nil {
		fmt.Fprintf(&b, "starting servers here failed: %v\n", oneLine(e.startErr))
	}
	if len(e.notStarting) > 0 {
		fmt.Fprintf(&b, "no server started here: %s\n", strings.Join(e.notStarting, "; "))
	}
	b.WriteString(waysOut)
	return b.String()
}

// exitCode is the exit status e deserves: exitUsage when a setting does not
// parse, exitFailed when a server answered (refusing the credentials, or with
// an error), exitUnreachable when every server in question does not answer.
func (e *serversError) exitCode() int {
	code := exitUnreachable
	for _, p := range e.problems {
		switch p.kind {
		case problemConfig:
			return exitUsage
		case problemAuth, problemOther:
			code = exitFailed
		}
	}
	return code
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e *serversError) Unwrap() []error {
	errs := make([]error, 0, len(e.problems)+1)
	for _, p := range e.problems {
		errs = append(errs, p)
	}
	if e.startErr != nil {
		errs = append(errs, e.startErr)
	}
	return errs
}
