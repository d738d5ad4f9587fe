package guard_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redfence/redfence/guard"
)

// The first Do of a Guard checks its pool (is it a Galera node that
// prepares statements on the server?). On a plain MySQL/MariaDB server the
// check passes whatever the DSN. A check that cannot be made (the database
// unreachable) fails that Do with the reason, before anything is locked,
// and is made again by the next Do rather than remembered.
func TestPoolCheckIsRetriedAfterItFailed(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	e := newEnv(t, envConfig{dial: func(c net.Conn) net.Conn {
		if down.Load() {
			_ = c.Close()
		}
		return c
	}})
	ctx := context.Background()
	ran := false
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		ran = true
		return nil
	})
	if err == nil || ran || errors.Is(err, guard.ErrUnsafePool) || !strings.Contains(err.Error(), "check the database pool") {
		t.Fatalf("Do with the database unreachable = %v (fn ran: %v), want the pool check's error before fn", err, ran)
	}
	if n, err := e.rdb.Exists(ctx, e.names("k").Lock, e.names("k").Queue).Result(); err != nil || n != 0 {
		t.Fatalf("%d lock keys in Redis after the failed check (%v), want none", n, err)
	}
	if err := e.g.CheckDatabase(ctx); err == nil {
		t.Fatal("CheckDatabase with the database unreachable = nil")
	}
	down.Store(false)
	if err := e.g.CheckDatabase(ctx); err != nil {
		t.Fatalf("CheckDatabase once the database answers: %v", err)
	}
	if err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }); err != nil {
		t.Fatalf("Do once the database answers: %v", err)
	}
	if n := e.counter(1); n != 1 {
		t.Fatalf("counter = %d, want 1", n)
	}
}

func TestCheckDatabaseRejectsBadInput(t *testing.T) {
	var zero *guard.Guard
	if err := zero.CheckDatabase(context.Background()); !errors.Is(err, guard.ErrInvalidGuard) {
		t.Fatalf("nil Guard: %v, want ErrInvalidGuard", err)
	}
	e := newEnv(t, envConfig{})
	if err := e.g.CheckDatabase(nil); !errors.Is(err, guard.ErrNilContext) {
		t.Fatalf("nil ctx: %v, want ErrNilContext", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.g.CheckDatabase(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v, want context.Canceled", err)
	}
}
