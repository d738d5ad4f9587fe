package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
)

// A nested Do on another key, one enclosing call, a pool of two
// connections: without HandOffAtClaim it gets a connection at once (the
// enclosing key's next holder waits in Redis, holding none). With
// HandOffAtClaim that next holder takes the second connection for its
// claim, which waits for the enclosing transaction's fence row, which would
// wait for the nested Do, which would wait for a connection until
// innodb_lock_wait_timeout ended the claim: Do refuses the nested call at
// once with ErrNestedPool instead.
func TestHandOffNestedDoNeedsRoomInThePool(t *testing.T) {
	for _, handOff := range []guard.HandOff{guard.HandOffAtEnd, guard.HandOffAuto, guard.HandOffAtClaim} {
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
			g := guard.New(e.locker, db, &guard.Options{HandOff: handOff})
			ctx := context.Background()
			inA, goNested := make(chan struct{}), make(chan struct{})
			var nested time.Duration
			var nestedErr error
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
					nestedErr = err
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
			errA := <-a
			must(t, <-b)
			if nested > 2*time.Second {
				t.Fatalf("the nested Do on another key took %v: stalled on the pool behind the next holder's claim", nested)
			}
			if handOff == guard.HandOffAtEnd {
				must(t, errA)
				return
			}
			if !errors.Is(nestedErr, guard.ErrNestedPool) || !errors.Is(errA, guard.ErrNestedPool) {
				t.Fatalf("nested Do = %v, outer Do = %v; want ErrNestedPool for both", nestedErr, errA)
			}
		})
	}
}
