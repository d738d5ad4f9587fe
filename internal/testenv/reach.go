package testenv

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// probeTimeout bounds the one check per server and test process: a server
// that does not answer within it counts as down for the whole process.
const probeTimeout = 3 * time.Second

// reachability is what the first check of one server found. Every later test
// that needs the server reuses it, so that a package whose server is down
// fails in about a second instead of spending each test's dial retries.
type reachability struct {
	once     sync.Once
	err      error       // nil: the server answered
	reported atomic.Bool // a test has already explained the failure
}

// probes holds the reachability of each server the process used, by kind
// and address. It is package state for the same reason as the resolvers:
// the servers are shared by every test of the process.
var probes sync.Map // string → *reachability

// reach checks the server named key once per process with check and returns
// what it found.
func reach(key string, check func() error) *reachability {
	v, _ := probes.LoadOrStore(key, new(reachability))
	r := v.(*reachability)
	r.once.Do(func() { r.err = check() })
	return r
}

// fail ends t because the server is down. The first test of the process to
// get here gives msg, one line naming the variable to set; later tests fail
// at once without repeating it, so that a package's output says it once.
func (r *reachability) fail(t testing.TB, msg string) {
	t.Helper()
	if r.reported.CompareAndSwap(false, true) {
		t.Fatal(msg + "; every test of this process that needs it fails at once")
	}
	t.FailNow()
}

// reachRedis checks the Redis server at addr once per process.
func reachRedis(addr string) *reachability {
	return reach("redis "+addr, func() error { return pingRedis(addr) })
}

// reachMySQL checks the MySQL server of dsn, parsed as cfg, once per
// process.
func reachMySQL(dsn string, cfg *mysql.Config) *reachability {
	return reach("mysql "+dsn, func() error { return pingMySQL(cfg) })
}

// pingRedis asks addr for a PING without the client's retries.
func pingRedis(addr string) error {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: probeTimeout, MaxRetries: -1, DialerRetries: 1,
	})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// pingMySQL connects to the server of cfg once.
func pingMySQL(cfg *mysql.Config) error {
	cfg = cfg.Clone()
	if cfg.Timeout == 0 || cfg.Timeout > probeTimeout {
		cfg.Timeout = probeTimeout
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	return db.PingContext(ctx)
}

// quietOnce installs the quiet loggers once per process.
var quietOnce sync.Once

// quietClientLogs stops go-redis and the MySQL driver from printing their own
// retry and connection messages (a line per dial attempt while a server is
// down). Their loggers are global, so only testenv's helpers, which run in
// test processes alone, set them; the library never does. What those
// messages report also comes back to the caller as an error.
func quietClientLogs() {
	quietOnce.Do(func() {
		redis.SetLogger(discardRedisLog{})
		_ = mysql.SetLogger(&mysql.NopLogger{})
	})
}

// QuietClientLogs is quietClientLogs for test binaries that start their own
// servers (the fault suite), whose faults would otherwise print a line per
// dial attempt for as long as a server is down or being failed over.
func QuietClientLogs() { quietClientLogs() }

// discardRedisLog is a go-redis logger that prints nothing.
type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
