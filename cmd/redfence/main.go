package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/redact"
)

func main() {
	// go-redis logs its own dial failures; the command reports them itself,
	// once, naming the server.
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quietRedis discards go-redis's internal log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1 // a server answered with an error, or the schema is dirty
	exitUsage       = 2 // bad flags, arguments, key or DSN
	exitUnreachable = 3 // Redis or MySQL did not answer
)

const usage = `usage:
  redfence inspect [flags] KEY          holder, queue, stored token and fence row of KEY
  redfence migrate [flags] up           create or upgrade the fence table
  redfence migrate [flags] version      the schema version recorded in the database
  redfence migrate [flags] down -yes    drop the fence table (every fence row with it)

"redfence COMMAND -h" lists the flags.
`

// run is the whole program; main only wires signals and the exit status.
// Nothing it prints shows a password: any argument or variable that may be a
// Redis URL or a DSN is masked wherever it is quoted.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	settings := append([]string{os.Getenv("REDIS_ADDR"), os.Getenv("MYSQL_DSN")}, args...)
	stdout, stderr = redact.Writer(stdout, settings...), redact.Writer(stderr, settings...)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	jsonOut := false
	switch args[0] {
	case "inspect":
		jsonOut, err = runInspect(ctx, args[1:], stdout, stderr)
	case "migrate":
		jsonOut, err = runMigrate(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		err = usageErrorf("unknown command %q", args[0])
		fmt.Fprint(stderr, usage)
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		return exitOK
	}
	return report(err, jsonOut, stdout, stderr)
}

// cliError is an error with the exit status it deserves.
type cliError struct {
	code int
	err  error
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &cliError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// unreachable says that server at addr (set through from) did not answer.
func unreachable(server, addr, from string, err error) error {
	return &cliError{code: exitUnreachable, err: fmt.Errorf("%s at %s does not answer (set by %s): %w", server, addr, from, err)}
}

// exitCode is the status err deserves: its own, or exitFailed.
func exitCode(err error) int {
	if ce, ok := errors.AsType[*cliError](err); ok {
		return ce.code
	}
	return exitFailed
}

var kinds = map[int]string{exitFailed: "failed", exitUsage: "usage", exitUnreachable: "unreachable"}

// errorJSON is what -json prints on stdout when a command fails.
type errorJSON struct {
	Error struct {
		Kind     string `json:"kind"` // failed, usage or unreachable
		ExitCode int    `json:"exit_code"`
		Message  string `json:"message"`
	} `json:"error"`
}

// report prints err on stderr (and as JSON on stdout with -json) and returns
// the exit status.
func report(err error, jsonOut bool, stdout, stderr io.Writer) int {
	code := exitCode(err)
	fmt.Fprintf(stderr, "redfence: %v\n", err)
	if jsonOut {
		var e errorJSON
		e.Error.Kind, e.Error.ExitCode, e.Error.Message = kinds[code], code, err.Error()
		writeJSON(stdout, e)
	}
	return code
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
