package guard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
)

// Two Guards sharing one Locker exclude each other through its lock, each
// fencing in its own database (a key whose work spans two databases, or
// two Guards over one Locker with different Namespaces). With
// HandOffAtClaim the lock is handed on at the claim, and the next holder's
// claim, on another fence row, does not wait: both fns run at once, with
// both transactions alive, and both commit.
func TestReviewHandOffSharedLockerOtherFenceRow(t *testing.T) {
	e1 := newEnv(t, envConfig{})
	e2 := newEnv(t, envConfig{})
	opt := &guard.Options{HandOffAtClaim: true}
	g1 := guard.New(e1.locker, e1.db, opt)
	g2 := guard.New(e1.locker, e2.db, opt) // same Locker, so the same lock for "k"
	ctx := context.Background()
	inA, releaseA := make(chan struct{}), make(chan struct{})
	a := make(chan error, 1)
	go func() {
		a <- g1.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			close(inA)
			<-releaseA
			return increment(ctx, tx, 1)
		})
	}()
	<-inA
	bRan := make(chan struct{})
	b := make(chan error, 1)
	go func() {
		b <- g2.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			close(bRan)
			return increment(ctx, tx, 1)
		})
	}()
	overlapped := false
	select {
	case <-bRan:
		overlapped = true
	case <-time.After(time.Second):
	}
	close(releaseA)
	must(t, <-a)
	must(t, <-b)
	if overlapped {
		t.Fatal("the second holder's fn ran while the first holder's fn ran; both committed")
	}
}

// A nested Do on another key that checkPool lets through (one enclosing
// call, a pool of two connections) gets a connection at once without
// HandOffAtClaim: the enclosing key's next holder waits in Redis, holding
// none. With HandOffAtClaim that next holder takes the second connection
// for its claim, which waits for the enclosing transaction's fence row,
// which waits for the nested Do, which waits for a connection: nothing
// moves until innodb_lock_wait_timeout ends the claim.
func TestReviewHandOffNestedPoolStall(t *testing.T) {
	for _, handOff := range []bool{false, true} {
		t.Run(fmt.Sprintf("handoff=%v", handOff), func(t *testing.T) {
			e := newEnv(t, envConfig{})
			mc, err := mysql.ParseDSN(e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if mc.Params == nil {
				mc.Params = map[string]string{}
			}
			mc.Params["innodb_lock_wait_timeout"] = "4"
			db := sqlx.MustOpen("mysql", mc.FormatDSN())
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(2)
			g := guard.New(e.locker, db, &guard.Options{HandOffAtClaim: handOff})
			ctx := context.Background()
			inA, goNested := make(chan struct{}), make(chan struct{})
			var nested time.Duration
			a := make(chan error, 1)
			go func() {
				a <- g.Do(ctx, "a", func(ctx context.Context, tx *guard.Tx) error {
					close(inA)
					<-goNested
					start := time.Now()
					err := g.Do(ctx, "b", func(ctx context.Context, tx *guard.Tx) error {
						return increment(ctx, tx, 2)
					})
					nested = time.Since(start)
					if err != nil {
						return err
					}
					return increment(ctx, tx, 1)
				})
			}()
			<-inA
			b := make(chan error, 1)
			go func() {
				b <- g.Do(ctx, "a", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) })
			}()
			time.Sleep(300 * time.Millisecond) // the second caller of "a" is under way
			close(goNested)
			must(t, <-a)
			must(t, <-b)
			if nested > 2*time.Second {
				t.Fatalf("the nested Do on another key took %v: stalled on the pool behind the next holder's claim", nested)
			}
		})
	}
}
