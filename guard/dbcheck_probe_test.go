package guard

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
)

// variablesDriver is a database/sql driver whose connections answer the
// pool check's SHOW VARIABLES statements from vars (a missing name: no row),
// so that the check can be run against servers this machine does not have.
type variablesDriver struct{ vars map[string]string }

func (d variablesDriver) Open(string) (driver.Conn, error) { return variablesConn(d), nil }

type variablesConn variablesDriver

func (c variablesConn) Prepare(query string) (driver.Stmt, error) {
	return nil, errors.New("variablesConn: no prepared statements")
}
func (c variablesConn) Close() error { return nil }
func (c variablesConn) Begin() (driver.Tx, error) {
	return nil, errors.New("variablesConn: no transactions")
}

func (c variablesConn) QueryContext(_ context.Context, query string, _ []driver.NamedValue) (driver.Rows, error) {
	name, ok := strings.CutPrefix(query, "SHOW VARIABLES LIKE '")
	if !ok {
		return nil, errors.New("variablesConn: unexpected query " + query)
	}
	name = strings.TrimSuffix(name, "'")
	rows := &variablesRows{}
	if v, ok := c.vars[name]; ok {
		rows.row = []string{name, v}
	}
	return rows, nil
}

type variablesRows struct{ row []string }

func (r *variablesRows) Columns() []string { return []string{"Variable_name", "Value"} }
func (r *variablesRows) Close() error      { return nil }
func (r *variablesRows) Next(dest []driver.Value) error {
	if r.row == nil {
		return io.EOF
	}
	dest[0], dest[1] = r.row[0], r.row[1]
	r.row = nil
	return nil
}

// The pool check tells a server whose peers also take writes from one
// whose row locks keep every writer out: on MySQL Group Replication in
// multi-primary mode, as on a Galera node, HandOffAuto holds the lock until
// the transaction ends and HandOffAtClaim is refused; Group Replication in
// single-primary mode and a server without either hand the lock on at the
// claim.
func TestPoolCheckFindsMultiPrimaryServers(t *testing.T) {
	for _, c := range []struct {
		name  string
		vars  map[string]string
		multi bool
	}{
		{"plain MySQL", map[string]string{}, false},
		{"MariaDB without wsrep", map[string]string{"wsrep_on": "OFF"}, false},
		{"Group Replication single-primary", map[string]string{"group_replication_single_primary_mode": "ON"}, false},
		{"Group Replication multi-primary", map[string]string{"group_replication_single_primary_mode": "OFF"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, h := range []HandOff{HandOffAuto, HandOffAtClaim, HandOffAtEnd} {
				db := sqlx.NewDb(sql.OpenDB(connector{variablesDriver{c.vars}}), "mysql")
				g := &Guard{db: db, opt: Options{HandOff: h}}
				refusal, err := g.probe(context.Background())
				if err != nil {
					t.Fatalf("%v: probe: %v", h, err)
				}
				if wantRefused := c.multi && h == HandOffAtClaim; (refusal != nil) != wantRefused || refusal != nil && !errors.Is(refusal, ErrUnsafePool) {
					t.Fatalf("%v: refusal %v, want one (ErrUnsafePool): %v", h, refusal, wantRefused)
				}
				if want := h == HandOffAtClaim || h == HandOffAuto && !c.multi; g.handsOffAtClaim() != want {
					t.Fatalf("%v: hands off at the claim: %v, want %v", h, g.handsOffAtClaim(), want)
				}
				_ = db.Close()
			}
		})
	}
}

type connector struct{ d variablesDriver }

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.d.Open("") }
func (c connector) Driver() driver.Driver                        { return c.d }
