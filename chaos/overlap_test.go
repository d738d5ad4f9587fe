package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// inFn is what a buy held inside fn reports: the token its Do runs under,
// the attempt, and its MySQL connection id.
type inFn struct {
	token   uint64
	attempt int
	conn    int64
}

// holdFirstAttempt returns a pause for [BuyFn] that reports where fn is on
// at (never blocking on it) and, on the first attempt only, stays after the
// stock was read until release is closed or the Do's ctx ends. Retried
// attempts run through.
func holdFirstAttempt(at chan<- inFn, release <-chan struct{}) func(context.Context, *guard.Tx) error {
	return func(ctx context.Context, tx *guard.Tx) error {
		var conn int64
		if err := tx.QueryRowxContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
			return err
		}
		select {
		case at <- inFn{token: tx.Token(), attempt: tx.Attempt(), conn: conn}:
		default:
		}
		if tx.Attempt() > 1 {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// awaitInFn waits for a report from a held buy, failing the test after
// within (or when the buy returned without reaching fn).
func awaitInFn(t *testing.T, at <-chan inFn, res <-chan Op, within time.Duration, who string) inFn {
	t.Helper()
	select {
	case f := <-at:
		return f
	case op := <-res:
		t.Fatalf("%s returned %s (%s) without reaching fn", who, op.Outcome, op.Err)
	case <-time.After(within):
		t.Fatalf("%s did not reach fn within %v", who, within)
	}
	return inFn{}
}

// awaitOp waits for a buy's outcome, failing the test after within.
func awaitOp(t *testing.T, res <-chan Op, within time.Duration, who string) Op {
	t.Helper()
	select {
	case op := <-res:
		return op
	case <-time.After(within):
		t.Fatalf("%s did not return within %v", who, within)
		return Op{}
	}
}

// dropGrant deletes every Redis key of the item's lock, token included: what
// a failover to a replica that missed them does. The holder is not told; it
// learns of the loss at its next renewal. The next Lock is granted at once,
// with a larger token (redislock mints at least the server's time in µs).
func (e *env) dropGrant(ctx context.Context, rdb *redis.Client) error {
	names, err := redislock.KeyNamesFor(e.prefix, e.item)
	if err != nil {
		return err
	}
	return rdb.Del(ctx, names.Lock, names.Token, names.Queue, names.Waiters, names.Released).Err()
}

// awaitFree waits until the item's lock has no holder and nobody queued.
func (e *env) awaitFree(ctx context.Context, rdb *redis.Client, within time.Duration) error {
	names, err := redislock.KeyNamesFor(e.prefix, e.item)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		n, err := rdb.Exists(ctx, names.Lock, names.Queue).Result()
		return n == 0, err
	})
}

// claimsWaiting counts the fence claims of the scenario's database that are
// running on other connections: a claim that has not returned at once is
// waiting for the fence row held by another transaction. A claim with a
// lock's token is an UPDATE of the row (fence.ClaimExisting); one in
// database mode an INSERT (fence.ClaimNext).
func (e *env) claimsWaiting(ctx context.Context) (int, error) {
	var n int
	err := e.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND (INFO LIKE ? OR INFO LIKE ?)`,
		"UPDATE "+fence.Table+" %", "INSERT INTO "+fence.Table+" %")
	return n, err
}

// killConn kills MySQL connection conn from another session and waits until
// the server has let it go (and with it its transaction and row locks).
func (e *env) killConn(ctx context.Context, conn int64) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := e.db.ExecContext(ctx, "KILL CONNECTION ?", conn); err != nil {
		return err
	}
	return waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		var n int
		err := e.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", conn)
		return n == 0, err
	})
}
