package guard

import (
	"context"
	"fmt"
	"sync"

	"github.com/redfence/redfence/fence"
)

// maxEnsured bounds the set of keys a Guard remembers as having a fence row;
// past it the set starts over, which costs one more read per key.
const maxEnsured = 4096

// ensured remembers which keys' fence rows this Guard has seen to exist, so
// that only the first Do on a key pays for fence.Ensure.
type ensured struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// ensure makes sure key's fence row exists before a transaction claims it,
// outside that transaction: a first claim that rolls back would otherwise
// make other transactions waiting on the same new row deadlock (see
// fence.Ensure). It runs on the pool, before any transaction is begun.
func (g *Guard) ensure(ctx context.Context, key string) error {
	e := &g.ensured
	e.mu.Lock()
	_, ok := e.keys[key]
	e.mu.Unlock()
	if ok {
		return nil
	}
	if err := fence.Ensure(ctx, g.db, key); err != nil {
		return fmt.Errorf("guard: %q: %w", key, err)
	}
	e.mu.Lock()
	if e.keys == nil || len(e.keys) >= maxEnsured {
		e.keys = make(map[string]struct{})
	}
	e.keys[key] = struct{}{}
	e.mu.Unlock()
	return nil
}
