package guard

// check.go owns the check of the server Do runs on, made once per Guard
// (or again after a failure): what the server is (a Galera node, a Group
// Replication member in multi-primary mode), and whether the hand-off at
// the claim and database mode are safe there. It runs no attempt.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// A Galera node can roll a transaction back on behalf of another node's
// commit (a brute-force abort) at any moment. MariaDB reports that abort to
// the statement it interrupts, except when it lands on a server-side PREPARE:
// the PREPARE succeeds, the transaction is gone, and the statements that
// follow run, and commit, one by one outside it, where the fence does not
// reach them. Do cannot see that from the client, so it refuses a Galera
// pool that prepares statements on the server; client-side interpolation
// (interpolateParams=true) sends each statement as one query whose failure
// is always reported.

const (
	sqlWsrepOn      = "SHOW VARIABLES LIKE 'wsrep_on'"
	sqlGRSingle     = "SHOW VARIABLES LIKE 'group_replication_single_primary_mode'"
	sqlPrepareCount = "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'"
	sqlWithArg      = "SELECT ?"
)

// dbCheck remembers the outcome of a Guard's one check of its pool.
type dbCheck struct {
	mu      sync.Mutex
	done    bool
	err     error         // the refusal, when done
	running chan struct{} // closed when the check in progress ends
	// multiPrimary: the pool reaches a server whose peers also take writes
	// (a Galera node, or Group Replication in multi-primary mode), so its
	// row locks do not keep out a writer on another member.
	multiPrimary atomic.Bool
}

// CheckDatabase returns nil when Do can run its transactions on the Guard's
// pool, or an error wrapping [ErrUnsafePool] that names what to change. It
// runs two to four short statements on one connection the first time it
// succeeds, and a transaction of one SELECT (whether the pool's sessions
// set sql_select_limit, see DoRead), and returns the kept result after
// that. Do calls it before it takes the lock; call it at start-up to fail
// fast, or so that the first Do does not pay for it. A check that could not
// be made (ctx ended, the database unreachable) is not kept: the next call
// tries again. ctx bounds the check, including the wait for a connection.
func (g *Guard) CheckDatabase(ctx context.Context) error {
	if err := g.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return ErrNilContext
	}
	return g.checkDatabase(ctx)
}

func (g *Guard) checkDatabase(ctx context.Context) error {
	c := &g.dbCheck
	for {
		c.mu.Lock()
		if c.done {
			c.mu.Unlock()
			return c.err
		}
		if wait := c.running; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		ch := make(chan struct{})
		c.running = ch
		c.mu.Unlock()

		refusal, err := g.probe(ctx)
		if err == nil && refusal == nil {
			err = g.makeClosedTx(ctx)
		}
		c.mu.Lock()
		if err == nil {
			c.done, c.err = true, refusal
		}
		c.running = nil
		close(ch)
		c.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("guard: check the database pool: %w", err)
		}
		return refusal
	}
}

// probe finds out whether the pool reaches a server with peers that also
// take writes (a Galera node, Group Replication in multi-primary mode), and,
// on a Galera node, whether the driver prepares statements on the server. It
// returns the refusal, if any, and an error when it could not tell.
func (g *Guard) probe(ctx context.Context) (refusal error, err error) {
	conn, err := g.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	on, err := variable(ctx, conn, sqlWsrepOn)
	galera := err == nil && strings.EqualFold(on, "ON")
	if err != nil && !errors.Is(err, sql.ErrNoRows) { // no row: no Galera support compiled in
		return nil, err
	}
	if !galera {
		// MySQL Group Replication: the variable exists once the plugin is
		// loaded; OFF means every member takes writes.
		single, err := variable(ctx, conn, sqlGRSingle)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil, nil
		case err != nil:
			return nil, err
		}
		if strings.EqualFold(single, "ON") {
			return nil, nil
		}
		return g.multiPrimaryFound("a Group Replication member in multi-primary mode (group_replication_single_primary_mode=OFF)"), nil
	}
	if refusal := g.multiPrimaryFound("a Galera node (wsrep_on=ON)"); refusal != nil {
		return refusal, nil
	}
	before, err := counter(ctx, conn)
	if err != nil {
		return nil, err
	}
	var one int
	if err := conn.QueryRowContext(ctx, sqlWithArg, 1).Scan(&one); err != nil {
		return nil, err
	}
	after, err := counter(ctx, conn)
	if err != nil {
		return nil, err
	}
	if after > before {
		return fmt.Errorf("%w: the database is a Galera node (wsrep_on=ON) and the driver prepares statements on the server; "+
			"set interpolateParams=true in the DSN of the pool Do runs on", ErrUnsafePool), nil
	}
	return nil, nil
}

// multiPrimaryFound records that the pool reaches what, a server whose row
// locks do not reach the other members that take writes: HandOffAuto holds
// the lock until the transaction ends from now on, and the options that
// count on the fence row's lock alone to keep callers apart are refused:
// HandOffAtClaim, and FallbackDatabase, whose callers, writing through
// different members while Redis is unavailable, would each get the row
// lock of their own member and run fn at once (certification at COMMIT
// lets one of them commit, but both fns ran).
func (g *Guard) multiPrimaryFound(what string) (refusal error) {
	g.dbCheck.multiPrimary.Store(true)
	switch {
	case g.opt.HandOff == HandOffAtClaim:
		return fmt.Errorf("%w: the database is %s, whose row locks do not reach the other members: "+
			"Options.HandOff HandOffAtClaim would let holders writing through different members run fn at once; use HandOffAuto or HandOffAtEnd", ErrUnsafePool, what)
	case g.opt.Fallback == FallbackDatabase:
		return fmt.Errorf("%w: the database is %s, whose row locks do not reach the other members: "+
			"Options.Fallback FallbackDatabase would let callers writing through different members run fn at once while Redis is unavailable; use FallbackNone", ErrUnsafePool, what)
	}
	return nil
}

// variable returns the value column of a SHOW … LIKE statement's one row.
func variable(ctx context.Context, conn *sql.Conn, query string) (string, error) {
	var name, value string
	err := conn.QueryRowContext(ctx, query).Scan(&name, &value)
	return value, err
}

func counter(ctx context.Context, conn *sql.Conn) (int64, error) {
	v, err := variable(ctx, conn, sqlPrepareCount)
	if err != nil {
		return 0, err
	}
	var n int64
	if _, err := fmt.Sscan(v, &n); err != nil {
		return 0, fmt.Errorf("Com_stmt_prepare %q: %w", v, err)
	}
	return n, nil
}
