package chaos

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Scenario 3c: the replies of Redis to one client are lost from the moment
// that client is granted the lock, while its requests still reach Redis:
// its unlock applies and hands the lock on, and it never learns. Several
// buyers share the client's Locker, so the lock often goes to one of them,
// which a release of the same Locker tells itself instead of publishing it.
// Nothing may be bought twice or oversold, no buy may be fenced (every
// holder claims well inside its lease, so only two holders of one turn
// could fence each other), and once the replies flow again the queue must
// move on within about a lease and a waiter timeout.
func TestScenarioUnlockReplyLost(t *testing.T) {
	e := newEnv(t, "unlock-reply-lost", 2000)
	ctx := ctxT(t, 90*time.Second)
	lo := fastLocks
	_, px, victim, load := partitionSetup(t, e, "victim-unlock-reply", lo)
	// Three buyers on the victim's Locker and Guard, each recorded as a
	// client of its own.
	victims := []*client{victim, victim.sibling(), victim.sibling()}

	lctx, stop := context.WithCancel(ctx)
	waitLoad := e.load(lctx, 15*time.Millisecond, append(load, victims...)...)
	defer func() { stop(); waitLoad() }()

	const rounds = 6
	next := 0
	for round := range rounds {
		time.Sleep(300 * time.Millisecond) // a window of normal buying
		var (
			mu     sync.Mutex
			first  uint64   // the grant whose holder's replies were cut
			later  []uint64 // the victim Locker's grants after it
			toxic  *Toxic
			cut    time.Time
			cutErr = make(chan error, 1)
		)
		victim.onAcquired(func(token uint64) {
			mu.Lock()
			defer mu.Unlock()
			if first != 0 {
				later = append(later, token)
				return
			}
			first = token
			var err error
			toxic, err = px.Blackhole(Downstream)
			cut = time.Now()
			cutErr <- err
		})
		mustNoErr(t, <-cutErr, "drop the victim's replies")
		// Hold the replies back past the victim's read timeout, so that its
		// unlock fails and its other buyers' re-checks go unanswered.
		time.Sleep(600 * time.Millisecond)
		mu.Lock()
		err := toxic.Remove()
		mu.Unlock()
		mustNoErr(t, err, "let the victim's replies through")
		healed := time.Now()
		t2, err := e.awaitCommit(ctx, first, lo.lease+lo.waiter+2*time.Second)
		if err != nil {
			t.Errorf("round %d: queue stalled after the victim's replies came back: %v", round, err)
		} else {
			t.Logf("round %d: replies cut at grant %d for %v; a later commit (token %d) %v after the heal", round,
				first, healed.Sub(cut).Round(time.Millisecond), t2, time.Since(healed).Round(time.Millisecond))
		}
		victim.onAcquired(nil)
		// Whether the lock went from the cut holder to another buyer of its
		// Locker: the first token committed after the cut holder's is one
		// of that Locker's grants.
		var after uint64
		mustNoErr(t, e.db.GetContext(ctx, &after, `SELECT COALESCE(MIN(token), 0) FROM orders WHERE item = ? AND token > ?`,
			e.item, first), "first token after the cut")
		mu.Lock()
		for _, tok := range later {
			if tok == after {
				next++
			}
		}
		mu.Unlock()
	}
	t.Logf("in %d of %d rounds the lock went from the cut holder to another buyer of its Locker", next, rounds)
	stop()
	waitLoad()
	sum := e.finish()
	if sum.Accepted == 0 {
		t.Error("nothing was bought")
	}
	// No buy may be fenced here. A claim is fenced only when a holder with a
	// newer (or the same) token claimed first: when a holder's grant ended
	// before its claim, or two turns held the lock at once. Neither happens
	// in this scenario: only Redis's replies are cut, never the database
	// path, so every holder claims within milliseconds of learning of its
	// grant, far inside its lease (1 s, and the hand-off lease of 1 s); the
	// cut (600 ms) is shorter than both, and the lock goes on only at the
	// claim, from the holder whose claim holds the fence row. A fenced buy
	// therefore means two holders of one turn: a hand-off told to another
	// waiter than the one Redis granted (which then claims with that
	// waiter's token while the true grantee, finding its grant at its next
	// re-check, claims with the same token and is fenced).
	if sum.Fenced != 0 {
		for _, op := range e.h.Ops() {
			if op.Kind == Buy && op.Outcome == Fenced {
				t.Logf("fenced: buy %s of client %d under token %d: %s", op.ID, op.Client, op.Token, op.Err)
			}
		}
		t.Errorf("%d buys fenced, want 0: two holders held one turn of the lock", sum.Fenced)
	}
}
