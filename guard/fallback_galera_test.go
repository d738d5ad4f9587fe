package guard

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
)

// Database mode keeps callers apart with the fence row's lock, which does
// not reach the other members of a multi-primary cluster: the pool check
// refuses Options.Fallback FallbackDatabase there, whatever the hand-off,
// with an error that names the option; on servers whose row locks keep
// every writer out it is allowed.
func TestPoolCheckRefusesDatabaseModeOnMultiPrimary(t *testing.T) {
	for _, c := range []struct {
		name  string
		vars  map[string]string
		multi bool
	}{
		{"plain MySQL", map[string]string{}, false},
		{"MariaDB without wsrep", map[string]string{"wsrep_on": "OFF"}, false},
		{"Group Replication single-primary", map[string]string{"group_replication_single_primary_mode": "ON"}, false},
		{"Group Replication multi-primary", map[string]string{"group_replication_single_primary_mode": "OFF"}, true},
		{"Galera node", map[string]string{"wsrep_on": "ON"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, h := range []HandOff{HandOffAuto, HandOffAtEnd} {
				db := sqlx.NewDb(sql.OpenDB(connector{variablesDriver{c.vars}}), "mysql")
				g := &Guard{db: db, opt: Options{HandOff: h, Fallback: FallbackDatabase}}
				refusal, err := g.probe(context.Background())
				_ = db.Close()
				switch {
				case !c.multi && (err != nil || refusal != nil):
					t.Fatalf("%v: refusal %v, probe error %v; want neither", h, refusal, err)
				case c.multi && (!errors.Is(refusal, ErrUnsafePool) || !strings.Contains(refusal.Error(), "Options.Fallback")):
					t.Fatalf("%v: refusal %v (probe error %v), want ErrUnsafePool naming Options.Fallback", h, refusal, err)
				}
			}
		})
	}
}
