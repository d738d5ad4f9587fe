package chaos

import (
	"context"
	"database/sql/driver"
	"net"
	"strings"
	"sync/atomic"
)

// commitHookConnector wraps the MySQL driver so that a test can act at the
// moment a transaction's COMMIT is about to be sent: every COMMIT, through
// Tx.Commit or sent as a statement (as guard does to bound it by its ctx),
// first runs the current hook (if any), then goes to the real driver.
type commitHookConnector struct {
	driver.Connector
	hook *atomic.Pointer[func()]
}

// fullConn is what go-sql-driver's connections implement; embedding it
// keeps every optional interface visible to database/sql.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

func (c *commitHookConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &hookConn{fullConn: conn.(fullConn), hook: c.hook}, nil
}

type hookConn struct {
	fullConn
	hook *atomic.Pointer[func()]
}

func (c *hookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.fullConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &hookTx{Tx: tx, hook: c.hook}, nil
}

func (c *hookConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if q := strings.TrimSpace(query); strings.EqualFold(q, "COMMIT") || strings.HasPrefix(q, "CALL redfence_commit('") {
		if f := c.hook.Load(); f != nil {
			(*f)()
		}
	}
	return c.fullConn.ExecContext(ctx, query, args)
}

type hookTx struct {
	driver.Tx
	hook *atomic.Pointer[func()]
}

func (t *hookTx) Commit() error {
	if f := t.hook.Load(); f != nil {
		(*f)()
	}
	return t.Tx.Commit()
}

// router dials either the server or a proxy in front of it, as the test
// decides per new connection.
type router struct {
	direct, proxied string
	viaProxy        atomic.Bool
}

func (r *router) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	addr := r.direct
	if r.viaProxy.Load() {
		addr = r.proxied
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}
