package galeratest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redfence/redfence/guard"
)

// In database mode the fence row's lock alone keeps callers apart, and on
// Galera it is local to a node: two instances writing through different
// nodes while Redis is unavailable would each claim the row on their own
// node and run fn at once (certification at COMMIT would then reject one,
// after both fns ran). Do refuses Options.Fallback FallbackDatabase on a
// Galera pool, before it locks or writes anything, naming the option.
func TestFallbackDatabaseRefusedOnGalera(t *testing.T) {
	w := newWorld(t, 60*time.Second)
	const key = "fallback:1"
	// Their Redis is down: without the refusal both run in database mode.
	opt := guard.Options{Fallback: guard.FallbackDatabase, FallbackAfter: 1}
	a := w.instance("a", 0, instanceConfig{redisAddr: "127.0.0.1:1", guard: opt})
	b := w.instance("b", 1, instanceConfig{redisAddr: "127.0.0.1:1", guard: opt})
	for _, in := range []*instance{a, b} {
		ran := false
		err := in.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			ran = true
			return increment(ctx, tx, in.name)
		})
		if !errors.Is(err, guard.ErrUnsafePool) || !strings.Contains(err.Error(), "Options.Fallback") || ran {
			t.Fatalf("instance %s: Do with FallbackDatabase on Galera = %v (fn ran: %v), want ErrUnsafePool naming Options.Fallback before fn", in.name, err, ran)
		}
		if err := in.g.CheckDatabase(w.ctx); !errors.Is(err, guard.ErrUnsafePool) {
			t.Fatalf("instance %s: CheckDatabase = %v, want ErrUnsafePool", in.name, err)
		}
	}
	if got := w.counters(); got[0] != 0 {
		t.Fatalf("counters %v after the refused calls, want 0", got)
	}
}
