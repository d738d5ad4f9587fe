package chaos

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// Scenario "claim-rides": three processes whose Guards send the claim with
// fn's first statement (guard.Options.ClaimWithFirstStatement), two buyers
// each, holding fn open a little between the read and the writes. Faults
// for the whole run: the lock's Redis keys are deleted under their holders
// (two holders then run at once, each starting fn before its claim is
// known, and only the fence row keeps their statements apart), and
// connections in a transaction are killed, also while a claim that rides
// waits for the fence row. Histories must be linearizable and nothing
// oversold; claims must have ridden, and the kills must have hit.
func TestScenarioClaimRides(t *testing.T) {
	runRides(t, "claim-rides", 11, false)
}

// Scenario "read-rides": the same, with the default options and buys made
// with guard.DoRead, whose read of the item goes with the claim before fn
// starts; with the lock handed on at the claim, the next holder's claim
// and read wait at the fence row while this holder's fn runs.
func TestScenarioReadRides(t *testing.T) {
	runRides(t, "read-rides", 13, true)
}

func runRides(t *testing.T, name string, seed uint64, doRead bool) {
	e := newEnv(t, name, 100_000)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 90*time.Second)

	var rides atomic.Int64
	var retries atomic.Int64
	var buyers []*client
	for range 3 {
		db := e.openRideCounting(&rides)
		db.SetMaxOpenConns(4)
		c := e.newClient(srv.Client(), db, fastLocks)
		o := guard.Options{ClaimWithFirstStatement: !doRead, MaxAttempts: 2, UnlockTimeout: 2 * time.Second}
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		o.Hooks.OnRetry = func(string, int, error) { retries.Add(1) }
		c.g = guard.New(c.locker, db, &o)
		c.doRead = doRead
		buyers = append(buyers, c, e.member(c))
	}
	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.loadHolding(lctx, 10*time.Millisecond, 2*time.Millisecond, buyers...)
	defer func() { stop(); waitLoad() }()

	faults, kills := e.dropGrantsAndKill(lctx, srv.Client(), seed)
	time.Sleep(6 * time.Second)
	stop()
	faults()
	waitLoad()
	s := e.finish()
	t.Logf("%d claims rode with a statement; %d connections killed; retries %d", rides.Load(), kills.Load(), retries.Load())
	if rides.Load() < int64(s.Accepted)/2 {
		t.Errorf("%d claims rode for %d buys committed: the scenario did not exercise the ride", rides.Load(), s.Accepted)
	}
	if kills.Load() == 0 || retries.Load()+int64(s.Failed+s.Unknown) == 0 {
		t.Errorf("%d kills, %d retries, %d failed and %d unknown buys: the kills never hit a transaction", kills.Load(), retries.Load(), s.Failed, s.Unknown)
	}
}

// openRideCounting opens a pool on e's database whose connections count,
// in rides, the compound statements that carry a claim with a statement of
// fn.
func (e *env) openRideCounting(rides *atomic.Int64) *sqlx.DB {
	cfg, err := mysql.ParseDSN(e.dsn)
	mustNoErr(e.t, err, "parse DSN")
	base, err := mysql.NewConnector(cfg)
	mustNoErr(e.t, err, "connector")
	db := sqlx.NewDb(sql.OpenDB(&rideCounter{Connector: base, rides: rides}), "mysql")
	e.t.Cleanup(func() { _ = db.Close() })
	return db
}

type rideCounter struct {
	driver.Connector
	rides *atomic.Int64
}

func (c *rideCounter) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &rideConn{fullConn: conn.(fullConn), rides: c.rides}, nil
}

type rideConn struct {
	fullConn
	rides *atomic.Int64
}

func (c *rideConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.HasPrefix(query, "BEGIN NOT ATOMIC") && strings.Contains(query, "EXECUTE IMMEDIATE X'") {
		c.rides.Add(1)
	}
	return c.fullConn.QueryContext(ctx, query, args)
}
