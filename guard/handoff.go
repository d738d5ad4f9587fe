package guard

// handoff.go owns the hand-off of the lock at the claim: when the claim
// holds the fence row, the Redis lock goes to the key's next waiter while
// fn runs. It decides when, not what an attempt does.

import (
	"context"
	"fmt"
	"time"

	"github.com/redfence/redfence/redislock"
)

// HandOff says when Do passes a key's Redis lock on to the key's next
// waiter (Options.HandOff).
type HandOff int

const (
	// HandOffAuto: HandOffAtClaim, except on a pool whose server has peers
	// that also take writes (a Galera node, Group Replication in
	// multi-primary mode), whose row locks do not reach the other members;
	// there HandOffAtEnd. It relies on the pool check ([Guard.CheckDatabase])
	// recognising such a server: with another multi-writer setup, set
	// HandOffAtEnd.
	HandOffAuto HandOff = iota
	// HandOffAtClaim: as soon as the attempt's claim holds the fence row,
	// before fn runs; the row's lock keeps the next holder out until the
	// transaction ends. Refused on a multi-primary pool ([ErrUnsafePool]).
	HandOffAtClaim
	// HandOffAtEnd: once the transaction has committed or rolled back.
	HandOffAtEnd
)

func (h HandOff) String() string {
	switch h {
	case HandOffAuto:
		return "auto"
	case HandOffAtClaim:
		return "at-claim"
	case HandOffAtEnd:
		return "at-end"
	}
	return fmt.Sprintf("HandOff(%d)", int(h))
}

// handsOffAtClaim reports whether Do passes the lock on at the claim:
// Options.HandOff, with HandOffAuto settled by the pool check (until the
// check has found a multi-primary server, at the claim).
func (g *Guard) handsOffAtClaim() bool {
	switch g.opt.HandOff {
	case HandOffAtClaim:
		return true
	case HandOffAtEnd:
		return false
	}
	return !g.dbCheck.multiPrimary.Load()
}

// relaying reports whether transactions are relayed between the callers of
// a key (Options.NoRelay).
func (g *Guard) relaying() bool { return !g.opt.NoRelay }

// handOff passes a Do's Redis lock on to the next waiter as soon as the
// attempt's claim holds the key's fence row (HandOffAtClaim). From
// then on the row lock, which the transaction keeps until it ends, is what
// keeps the next holder out: its claim waits for this COMMIT or ROLLBACK.
// The next holder's lock hand-off, BEGIN and claim so overlap with this
// holder's fn and COMMIT instead of following them.
//
// The unlock runs on a goroutine that Do waits for before it returns, so
// that its round trip overlaps fn's statements as well.
type handOff struct {
	g      *Guard
	lk     *redislock.Lock
	detach func() // stops watching the lock; fn's ctx is left alone

	started    bool // release was called
	done       chan struct{}
	start, end time.Time
	err        error
}

func newHandOff(g *Guard, lk *redislock.Lock, detach func()) *handOff {
	return &handOff{g: g, lk: lk, detach: detach, done: make(chan struct{})}
}

// release stops the lock-loss watch and starts the unlock. A loss of the
// lease after this point means nothing: the lock is being given up, and the
// claim already holds the row.
func (h *handOff) release(ctx context.Context) {
	if h == nil || h.started {
		return
	}
	h.started = true
	h.detach()
	h.start = time.Now()
	go func() {
		defer close(h.done)
		h.err = h.g.unlock(ctx, h.lk)
		h.end = time.Now()
	}()
}

// handed reports whether release was called.
func (h *handOff) handed() bool { return h != nil && h.started }

// wait returns the unlock's outcome once it has returned.
func (h *handOff) wait() error {
	<-h.done
	return h.err
}
