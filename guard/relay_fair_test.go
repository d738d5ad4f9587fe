package guard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// Relaying never shuts the rest of the pool's users out: with as many
// connections as busy keys, each key's callers passing their connection on
// without pause, a Do on another key and a plain query still get a
// connection. Every half second a busy key's connection goes back to the
// pool, where database/sql gives it to one of the requests waiting, at
// random: the other key's, or the busy key's next holder's. So each gets it
// within a few half-seconds (half the time at the first); the bound allows
// twenty.
func TestRelayLeavesThePoolToOthers(t *testing.T) {
	for _, hot := range []int{1, 2} { // keys, and connections
		t.Run(fmt.Sprintf("%d busy keys, pool of %d", hot, hot), func(t *testing.T) {
			e := newEnv(t, envConfig{})
			e.db.SetMaxOpenConns(hot)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			must(t, e.g.Do(ctx, "other", func(ctx context.Context, tx *guard.Tx) error { return nil })) // its fence row
			stop := make(chan struct{})
			var wg sync.WaitGroup
			// committed[k] is closed at busy key k's first commit: from then
			// on its callers relay.
			committed := make([]chan struct{}, hot)
			once := make([]sync.Once, hot)
			for k := range committed {
				committed[k] = make(chan struct{})
			}
			for i := range 4 * hot {
				k := i % hot
				key := fmt.Sprintf("busy-%d", k)
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
						if e.g.Do(octx, key, func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }) == nil {
							once[k].Do(func() { close(committed[k]) })
						}
						ocancel()
					}
				})
			}
			defer func() { close(stop); wg.Wait() }()
			for _, c := range committed {
				select {
				case <-c:
				case <-ctx.Done():
					t.Fatal("a busy key never committed")
				}
			}
			octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
			defer ocancel()
			start := time.Now()
			if err := e.g.Do(octx, "other", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 2) }); err != nil {
				t.Fatalf("Do on another key beside the busy ones: %v after %v", err, time.Since(start))
			}
			t.Logf("Do on another key took %v", time.Since(start).Round(time.Millisecond))
			start = time.Now()
			var one int
			if err := e.db.GetContext(octx, &one, "SELECT 1"); err != nil {
				t.Fatalf("plain query beside the busy keys: %v after %v", err, time.Since(start))
			}
			t.Logf("plain query took %v", time.Since(start).Round(time.Millisecond))
		})
	}
}
