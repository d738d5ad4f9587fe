package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/redact"
)

func main() {
	// go-redis prints its own connection failures; the program reports them
	// itself, once, with what to do about them.
	redis.SetLogger(quietRedis{})
	// Every way of being asked to stop ends ctx, so that the servers the
	// program started are stopped and their files removed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// So does the end of the process that started it (go run's go command).
	if err := stopWithParent(); err != nil {
		fmt.Fprintf(os.Stderr, "inventory: cannot ask to be stopped with the process that started it: %v\n", err)
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quietRedis discards go-redis's internal log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// Exit statuses, the same as cmd/redfence's.
const (
	exitOK          = 0
	exitFailed      = 1 // a mode that claims safety oversold, a run failed or was interrupted, a server refused the credentials or answered with an error
	exitUsage       = 2 // bad flags or arguments, or REDIS_ADDR or MYSQL_DSN that does not parse
	exitUnreachable = 3 // Redis or MySQL does not answer, and none could be started in its place
)

// startServersUsage documents -start-servers of both subcommands.
const startServersUsage = "when Redis or MySQL does not answer, start a throwaway one for this run (installed redis-server/mariadbd, else a container when built with -tags containers), removed when it ends"

// run is the whole program; main only wires signals and the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, localLauncher(), args, stdout, stderr)
}

// runWith is run with the ways of starting missing servers given. Nothing
// it prints, logs included, shows the password of REDIS_ADDR or MYSQL_DSN.
func runWith(ctx context.Context, l launcher, args []string, stdout, stderr io.Writer) int {
	settings := []string{os.Getenv("REDIS_ADDR"), os.Getenv("MYSQL_DSN")}
	stdout, stderr = redact.Writer(stdout, settings...), redact.Writer(stderr, settings...)
	if len(args) > 0 && args[0] == "serve" {
		return runServe(ctx, l, args[1:], stdout, stderr)
	}
	cfg, err := parseDemoFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "inventory: %v\n", err)
		return exitUsage
	}
	srv, err := serversFromEnv(defaultDatabase)
	if err != nil {
		return fail(ctx, stderr, err)
	}
	srv, release, err := provide(ctx, srv, l, cfg.startServers, stderr)
	defer release()
	if err != nil {
		return fail(ctx, stderr, err)
	}
	cfg.where = srv.describe()
	results, err := runDemo(ctx, cfg, srv, stderr)
	if err != nil {
		return fail(ctx, stderr, err)
	}
	if !writeReport(stdout, cfg, results) {
		return exitFailed
	}
	return exitOK
}

// fail prints err for a person, without a stack trace, and returns the exit
// status it deserves. Once ctx, the run's, has ended, err is the
// interruption's doing, whatever it says (a connection it cut reads as
// "bad connection"), and is reported as the interruption.
func fail(ctx context.Context, stderr io.Writer, err error) int {
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		fmt.Fprintln(stderr, "inventory: interrupted")
		return exitFailed
	}
	fmt.Fprintf(stderr, "inventory: %v\n", err)
	if se, ok := errors.AsType[*serversError](err); ok {
		return se.exitCode()
	}
	return exitFailed
}

// checkOutageFlags checks -redis-outage and the flags that go with it.
func checkOutageFlags(cfg demoConfig) error {
	switch {
	case cfg.outage == "":
		return nil
	case cfg.outage != outageKill && cfg.outage != outagePause:
		return fmt.Errorf("unknown -redis-outage %q (want %s or %s)", cfg.outage, outageKill, outagePause)
	case !slices.Contains(cfg.modes, modeGuard):
		return errors.New("-redis-outage takes Redis away from the guard mode; add it to -mode")
	case cfg.outageAfter < 0 || cfg.outageAfter >= cfg.stock/cfg.qty:
		return fmt.Errorf("-outage-after must be between 0 and %d (the orders -stock allows, less one)", cfg.stock/cfg.qty-1)
	case cfg.outageLength <= 0:
		return errors.New("-outage-for must be positive")
	}
	return nil
}

func parseDemoFlags(args []string, stderr io.Writer) (demoConfig, error) {
	cfg := demoConfig{}
	fs := flag.NewFlagSet("inventory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "all", "mode to run: all, "+strings.Join(allModes, ", ")+" (comma-separated list allowed)")
	fs.IntVar(&cfg.buyers, "buyers", 64, "concurrent buyers")
	fs.IntVar(&cfg.instances, "instances", 4, "simulated application instances (separate Redis clients, Lockers and DB pools)")
	fs.IntVar(&cfg.stock, "stock", 256, "initial stock of the SKU")
	fs.IntVar(&cfg.orders, "orders", 8, "orders each buyer places, stopping at the first sold-out answer")
	fs.IntVar(&cfg.qty, "qty", 1, "units per order")
	fs.IntVar(&cfg.poolSize, "pool", 8, "database connections per instance")
	fs.StringVar(&cfg.sku, "sku", "widget", "the SKU everyone buys")
	fs.StringVar(&cfg.prefix, "redis-prefix", defaultKeyPrefix, "prefix of the lock keys in Redis")
	fs.DurationVar(&cfg.pause, "pause", 500*time.Millisecond,
		"in redis-only and guard: freeze one lock holder's instance for this long right after it takes the lock, and two between reading and writing the stock (0: no stall)")
	fs.BoolVar(&cfg.failover, "failover", true,
		"in redis-only and guard: delete the lock's Redis keys once while it is held, as a failover to a replica that missed them would")
	fs.DurationVar(&cfg.lease, "lease", 250*time.Millisecond, "lock lease; -pause longer than it makes holders lose their lock")
	fs.DurationVar(&cfg.work, "work", 0, "extra time a purchase spends between reading and writing the stock")
	fs.DurationVar(&cfg.timeout, "timeout", time.Minute, "bound on each mode")
	fs.BoolVar(&cfg.startServers, "start-servers", true, startServersUsage)
	fs.StringVar(&cfg.outage, "redis-outage", "",
		"in guard: run on a redis-server of the run's own with Options.Outage.Fallback = FallbackDatabase, and take that server away mid-run: "+
			outageKill+" (SIGKILL, restart empty) or "+outagePause+" (SIGSTOP, SIGCONT)")
	fs.IntVar(&cfg.outageAfter, "outage-after", 0, "with -redis-outage: accepted orders before Redis goes away (0: a quarter of -stock/-qty)")
	fs.DurationVar(&cfg.outageLength, "outage-for", 2*time.Second,
		"with -redis-outage: how long Redis stays away, at most: it comes back early once a quarter of the stock left when it went away is sold")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: inventory [flags]     run the oversell demo\n       inventory serve [flags]  run the HTTP API\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (subcommands: serve)", fs.Arg(0))
	}
	if *mode == "all" {
		cfg.modes = allModes
	} else {
		for m := range strings.SplitSeq(*mode, ",") {
			m = strings.TrimSpace(m)
			if !slices.Contains(allModes, m) {
				return cfg, fmt.Errorf("unknown mode %q (want all, %s)", m, strings.Join(allModes, ", "))
			}
			cfg.modes = append(cfg.modes, m)
		}
	}
	switch {
	case cfg.buyers < 1, cfg.instances < 1, cfg.orders < 1, cfg.poolSize < 1:
		return cfg, errors.New("-buyers, -instances, -orders and -pool must be at least 1")
	case cfg.stock < 0:
		return cfg, errors.New("-stock must not be negative")
	case cfg.qty < 1:
		return cfg, errors.New("-qty must be at least 1")
	case cfg.pause < 0, cfg.work < 0:
		return cfg, errors.New("-pause and -work must not be negative")
	case cfg.lease < 30*time.Millisecond:
		return cfg, errors.New("-lease must be at least 30ms")
	case cfg.timeout <= 0:
		return cfg, errors.New("-timeout must be positive")
	}
	if err := checkOutageFlags(cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}
