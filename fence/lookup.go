package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Fence is a fence row as stored.
type Fence struct {
	Resource  string
	Token     uint64    // highest token accepted; 0 for a row made by Ensure and never claimed
	Owner     string    // owner that presented Token
	OpID      string    // operation id of the last accepted claim ("" for Claim)
	Claims    uint64    // number of accepted claims
	UpdatedAt time.Time // time of the last accepted claim (server clock, UTC)
	// PrevToken and PrevOpID are the token and operation id the last
	// accepted claim replaced: what the row held when it was claimed
	// (0 and "" before the second claim).
	PrevToken uint64
	PrevOpID  string
}

// lookupSQL formats updated_at itself so that Lookup does not depend on the
// DSN's parseTime and loc settings.
const lookupSQL = "SELECT token, owner, op_id, claims, DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f'), prev_token, prev_op_id" +
	" FROM " + Table + " WHERE resource = ?"

// syncWaitSQL is a causal read of nothing: on a node of a MariaDB Galera
// Cluster, wsrep_sync_wait = 1 (set for this statement only) makes the node
// first apply every write set the cluster committed before the statement
// started. The setting is MariaDB's executable comment: MySQL runs a plain
// SELECT 1, and a MariaDB server that is not a cluster node has nothing to
// wait for.
const syncWaitSQL = "/*M!100300 SET STATEMENT wsrep_sync_wait = 1 FOR */ SELECT 1"

// erUnknownSystemVariable is ER_UNKNOWN_SYSTEM_VARIABLE: the answer of a
// MariaDB server built without wsrep to syncWaitSQL.
const erUnknownSystemVariable = 1193

// SyncWait returns once the database node behind q has applied every write
// committed in its cluster before the call: on a MariaDB Galera Cluster
// node, a node serves reads from its own copy, which may lag commits made
// through other nodes. Elsewhere it is one SELECT 1. It costs one round trip.
//
// Galera makes the wait at the start of a statement outside a transaction
// only (wsrep_sync_wait is not checked inside one), so run SyncWait on the
// *sql.Conn that is about to begin the transaction whose reads must be
// causal; on a pool it would wait on an arbitrary connection. Other Galera
// distributions (MySQL-based ones) skip it: set wsrep_sync_wait on their
// sessions instead.
//
// Errors: [ErrNilTx], or the server's error wrapped (on a node outside the
// primary component, error 1047).
func SyncWait(ctx context.Context, q Querier) error {
	if isNil(q) {
		return ErrNilTx
	}
	var one int
	err := q.QueryRowContext(ctx, syncWaitSQL).Scan(&one)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erUnknownSystemVariable {
		return nil // not a cluster node: nothing to wait for
	}
	if err != nil {
		return fmt.Errorf("fence: sync wait: %w", err)
	}
	return nil
}

// conner is a pool that hands out dedicated connections.
type conner interface {
	Conn(ctx context.Context) (*sql.Conn, error)
}

// Lookup reads the fence of resource without locking it. Inside a
// transaction it sees that transaction's snapshot; on a *sql.DB it runs in a
// read-only transaction of its own and so sees the latest committed row
// whatever the DSN's autocommit setting, which is what settling an unknown
// COMMIT outcome needs (see [ClaimOp]). On a pool the read is also causal on
// a node of a MariaDB Galera Cluster ([SyncWait] first, on the connection
// that then runs the transaction: one round trip more), so a claim committed
// through another node is seen. Inside the caller's transaction Lookup sees
// what that transaction's snapshot holds: on a cluster, begin it right after
// [SyncWait] on the same *sql.Conn, or with wsrep_sync_wait set on the
// session. It returns [ErrNoFence] when the resource has never
// been claimed or ensured, and [ErrInvalidResource] or [ErrNilTx] for bad
// input.
func Lookup(ctx context.Context, q Querier, resource string) (Fence, error) {
	if isNil(q) {
		return Fence{}, ErrNilTx
	}
	if err := validResource(resource); err != nil {
		return Fence{}, err
	}
	f := Fence{Resource: resource}
	var owner, opID, prevOpID []byte
	var updated string
	read := func(q Querier) error {
		return q.QueryRowContext(ctx, lookupSQL, resource).Scan(&f.Token, &owner, &opID, &f.Claims, &updated, &f.PrevToken, &prevOpID)
	}
	var err error
	if c, ok := q.(conner); ok && isPool(q) {
		err = causalRead(ctx, c, read)
	} else {
		err = inTx(ctx, q, &sql.TxOptions{ReadOnly: true}, read)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Fence{}, fmt.Errorf("%w: %q", ErrNoFence, resource)
	}
	if err != nil {
		return Fence{}, fmt.Errorf("fence: lookup %q: %w", resource, err)
	}
	f.Owner, f.OpID, f.PrevOpID = string(owner), string(opID), string(prevOpID)
	if f.UpdatedAt, err = time.Parse("2006-01-02 15:04:05.999999", updated); err != nil {
		return Fence{}, fmt.Errorf("fence: lookup %q: updated_at %q: %w", resource, updated, err)
	}
	return f, nil
}

// causalRead runs read in a read-only transaction on a connection of its own
// that has first waited for the cluster's earlier commits ([SyncWait]).
func causalRead(ctx context.Context, pool conner, read func(Querier) error) error {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := SyncWait(ctx, conn); err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	if err := read(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
