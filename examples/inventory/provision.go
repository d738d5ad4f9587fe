package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/internal/devserver"
)

// ownServer is a server this run started; close stops it and removes its
// files.
type ownServer struct {
	addr  string // Redis: host:port; MySQL: a DSN with no database selected
	desc  string // for the user: what it is and where
	gone  string // for the user, once close has returned
	close func() error
}

// way is one means of starting a server here.
type way struct {
	name string
	// available returns nil when this way can be used here, or why not.
	available func() error
	start     func(ctx context.Context) (*ownServer, error)
}

// launcher holds the ways of starting each server, most preferred first.
// Tests replace them.
type launcher struct {
	redis, mysql []way
}

// dockerTimeout bounds the question whether a Docker engine answers, asked
// only when a server cannot be started as a local process.
const dockerTimeout = 800 * time.Millisecond

// errContainersOff says how to build the program with containers, which the
// default build leaves out to build quickly.
var errContainersOff = errors.New("containers are not compiled in (to start them, run: go run -tags containers ./examples/inventory)")

// localLauncher starts redis-server and mariadbd when they are installed,
// else containers when a Docker engine answers.
func localLauncher() launcher {
	docker := sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		defer cancel()
		if err := devserver.DockerAvailable(ctx); err != nil {
			if errors.Is(err, devserver.ErrNoContainers) {
				return errContainersOff
			}
			return fmt.Errorf("no Docker engine answers for containers (%v)", oneLine(err))
		}
		return nil
	})
	return launcher{
		redis: []way{
			{name: "redis-server",
				available: func() error { _, err := devserver.LookRedis(); return err },
				start: func(ctx context.Context) (*ownServer, error) {
					p, err := devserver.StartRedis(ctx, devserver.RedisOptions{})
					if err != nil {
						return nil, err
					}
					return &ownServer{addr: p.Addr, desc: processDesc(p), gone: processGone(p), close: p.Close}, nil
				}},
			{name: "a Redis container", available: docker, start: func(ctx context.Context) (*ownServer, error) {
				c, err := devserver.StartRedisContainer(ctx)
				if err != nil {
					return nil, err
				}
				return &ownServer{addr: c.Addr, desc: "a " + c.Image + " container", gone: "removed the " + c.Image + " container",
					close: closeContainer(c)}, nil
			}},
		},
		mysql: []way{
			{name: "mariadbd",
				available: func() error { _, err := devserver.LookMariaDB(); return err },
				start: func(ctx context.Context) (*ownServer, error) {
					p, err := devserver.StartMariaDB(ctx, devserver.MariaDBOptions{})
					if err != nil {
						return nil, err
					}
					return &ownServer{addr: devserver.RootDSN(p.Addr), desc: processDesc(p), gone: processGone(p), close: p.Close}, nil
				}},
			{name: "a MySQL container", available: docker, start: func(ctx context.Context) (*ownServer, error) {
				c, err := devserver.StartMySQLContainer(ctx)
				if err != nil {
					return nil, err
				}
				return &ownServer{addr: c.DSN, desc: "a " + c.Image + " container", gone: "removed the " + c.Image + " container",
					close: closeContainer(c)}, nil
			}},
		},
	}
}

func processDesc(p *devserver.Process) string {
	return fmt.Sprintf("%s started by this run, pid %d, files in %s", p.Name, p.Pid(), p.Dir)
}

func processGone(p *devserver.Process) string {
	return fmt.Sprintf("stopped %s (pid %d) and removed %s", p.Name, p.Pid(), p.Dir)
}

func closeContainer(c *devserver.Container) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return c.Close(ctx)
	}
}

// startTimeout bounds the start of the servers this run starts (a
// container may have an image to pull).
const startTimeout = 3 * time.Minute

// provide returns servers that answer: the configured ones or, for those
// where nothing answers and when start allows it, servers this run starts.
// It says on log what it starts. release stops them and removes their files;
// it is never nil and must be called on every exit path. Credentials that are
// refused and settings that do not parse are reported, never worked around.
func provide(ctx context.Context, s servers, l launcher, start bool, log io.Writer) (_ servers, release func(), err error) {
	release = func() {}
	problems := probe(ctx, s)
	if ctx.Err() != nil {
		return s, release, ctx.Err()
	}
	if len(problems) == 0 {
		return s, release, nil
	}
	for _, p := range problems {
		if p.kind != problemDown {
			return s, release, &serversError{problems: problems}
		}
	}
	if !start {
		return s, release, &serversError{problems: problems, notStarting: []string{"-start-servers=false"}}
	}

	// Choose a way for every missing server before starting any, so that a
	// server that cannot be had costs nothing and is named with the others.
	chosen := make([]way, len(problems))
	var missing []string
	for i, p := range problems {
		ways := l.redis
		if p.which == "MySQL" {
			ways = l.mysql
		}
		var why []string
		for _, w := range ways {
			if err := w.available(); err != nil {
				why = append(why, strings.TrimPrefix(oneLine(err), "devserver: "))
				continue
			}
			chosen[i] = w
			break
		}
		if chosen[i].start == nil {
			missing = append(missing, fmt.Sprintf("for %s, %s", p.which, strings.Join(why, ", and ")))
		}
	}
	if len(missing) > 0 {
		return s, release, &serversError{problems: problems, notStarting: missing}
	}

	names := make([]string, len(problems))
	for i, p := range problems {
		names[i] = p.which + " (" + chosen[i].name + ")"
	}
	fmt.Fprintf(log, "inventory: nothing answers at %s; starting %s for this run, removed when it ends\n",
		joinAnd(problemAddrs(problems)), joinAnd(names))
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	own := make([]*ownServer, len(problems))
	errs := make([]error, len(problems))
	var wg sync.WaitGroup
	for i := range problems {
		wg.Go(func() { own[i], errs[i] = chosen[i].start(sctx) })
	}
	wg.Wait()
	release = func() {
		for _, o := range own {
			if o == nil {
				continue
			}
			if err := o.close(); err != nil {
				fmt.Fprintf(log, "inventory: %v\n", err)
			} else {
				fmt.Fprintf(log, "inventory: %s\n", o.gone)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		release()
		if ctx.Err() != nil {
			return s, func() {}, ctx.Err()
		}
		return s, func() {}, &serversError{problems: problems, startErr: err}
	}
	for i, p := range problems {
		fmt.Fprintf(log, "inventory: started %s (%s)\n", p.which, own[i].desc)
		if p.which == "Redis" {
			s.redisAddr, s.redisStarted = own[i].addr, own[i].desc
			continue
		}
		cfg, err := mysql.ParseDSN(own[i].addr)
		if err != nil {
			release()
			return s, func() {}, err
		}
		cfg.DBName = s.database
		s.mysqlDSN, s.mysqlStarted = cfg.FormatDSN(), own[i].desc
	}
	return s, release, nil
}

func problemAddrs(ps []*serverProblem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.addr + " (" + p.which + ")"
	}
	return out
}

func joinAnd(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
