package galeratest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// recorder keeps what a Guard's hooks saw.
type recorder struct {
	mu      sync.Mutex
	commits []guard.Step // StepCommit steps
	retries []error
	tokens  []uint64 // tx.Token() of each run of fn
}

func (r *recorder) hooks() guard.Hooks {
	return guard.Hooks{
		OnStep: func(_ context.Context, s guard.Step) {
			if s.Kind == guard.StepCommit {
				r.mu.Lock()
				r.commits = append(r.commits, s)
				r.mu.Unlock()
			}
		},
		OnRetry: func(_ string, _ int, err error) {
			r.mu.Lock()
			r.retries = append(r.retries, err)
			r.mu.Unlock()
		},
	}
}

func (r *recorder) ran(token uint64) {
	r.mu.Lock()
	r.tokens = append(r.tokens, token)
	r.mu.Unlock()
}

// TestCertificationFailureAtCommitIsRetried: two instances on different
// nodes hold one key at once (their Lockers use different Redis servers: a
// split lock, as after a failover that lost a grant). Each claims the fence
// row on its own node, where the other's row lock does not reach. The
// winner commits first; applying its write set on the loser's node aborts
// the loser's transaction (a brute-force abort: Galera's certification
// decided for the winner), while the loser waits between fn and COMMIT. The
// loser's COMMIT then fails with the deadlock error (1213). Do must take
// that as "not committed", retry under the same lock and token, and either
// commit once (the loser's token is the newer one) or be fenced (it is the
// older one): the aborted attempt is never reported as a success and no
// increment is applied twice or lost.
func TestCertificationFailureAtCommitIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name        string
		loserNewer  bool
		wantCounter int
	}{
		{"loser holds the newer token: retried and committed once", true, 2},
		{"loser holds the older token: retried and fenced", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 60*time.Second)
			const key = "cert:1"
			other := testenv.RedisServer(t)
			var rec recorder
			loser := w.instance("loser", 0, instanceConfig{guard: guard.Options{Hooks: rec.hooks(), MaxAttempts: 3}})
			winner := w.instance("winner", 1, instanceConfig{redisAddr: other.Addr})

			winnerIn, winnerGo := make(chan uint64, 1), make(chan struct{})
			winnerRes := make(chan error, 1)
			startWinner := func() {
				go func() {
					winnerRes <- winner.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
						winnerIn <- tx.Token()
						<-winnerGo
						return increment(ctx, tx, "winner")
					})
				}()
			}
			loserReady, loserGo := make(chan uint64, 1), make(chan struct{})
			loserRes := make(chan error, 1)
			startLoser := func() {
				go func() {
					loserRes <- loser.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
						rec.ran(tx.Token())
						if err := increment(ctx, tx, "loser"); err != nil {
							return err
						}
						if tx.Attempt() == 1 {
							loserReady <- tx.Token()
							<-loserGo
						}
						return nil
					})
				}()
			}
			var winnerToken, loserToken uint64
			// Tokens follow the order of the grants.
			if tc.loserNewer {
				startWinner()
				winnerToken = <-winnerIn
				startLoser()
				loserToken = <-loserReady
			} else {
				startLoser()
				loserToken = <-loserReady
				startWinner()
				winnerToken = <-winnerIn
			}
			if (loserToken > winnerToken) != tc.loserNewer {
				t.Fatalf("tokens: loser %d, winner %d", loserToken, winnerToken)
			}
			close(winnerGo)
			if err := <-winnerRes; err != nil {
				t.Fatalf("winner: %v", err)
			}
			// A causal read on the loser's node returns once the winner's
			// write set is applied there, which aborted the loser.
			if got := w.counters(); got[0] != 1 {
				t.Fatalf("counter on the loser's node after the winner's commit: %d, want 1", got[0])
			}
			close(loserGo)
			err := <-loserRes

			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.commits) == 0 || rec.commits[0].Attempt != 1 {
				t.Fatalf("commit steps %+v: want attempt 1's COMMIT first", rec.commits)
			}
			var me *mysql.MySQLError
			if first := rec.commits[0].Err; !errors.As(first, &me) || me.Number != 1213 {
				t.Fatalf("attempt 1's COMMIT: %v, want the deadlock error 1213 of an aborted Galera transaction", first)
			}
			if len(rec.retries) != 1 {
				t.Fatalf("retries: %v, want exactly one (after the failed COMMIT)", rec.retries)
			}
			for _, tok := range rec.tokens {
				if tok != loserToken {
					t.Fatalf("fn ran with tokens %v; every attempt must run under the lock's token %d", rec.tokens, loserToken)
				}
			}
			if tc.loserNewer {
				if err != nil {
					t.Fatalf("loser: %v, want nil after the retry", err)
				}
				if len(rec.tokens) != 2 || len(rec.commits) != 2 || rec.commits[1].Err != nil {
					t.Fatalf("fn runs %v, commits %+v: want a second attempt that commits", rec.tokens, rec.commits)
				}
			} else {
				if !errors.Is(err, guard.ErrFenced) {
					t.Fatalf("loser: %v, want guard.ErrFenced on the retry", err)
				}
				if len(rec.tokens) != 1 {
					t.Fatalf("fn ran %d times; a fenced retry must not run it", len(rec.tokens))
				}
			}
			for i, n := range w.counters() {
				if n != tc.wantCounter {
					t.Errorf("node %d: counter %d, want %d", i+1, n, tc.wantCounter)
				}
			}
			for i := range w.synced {
				rows := w.appliedRows(i, "loser")
				switch {
				case tc.loserNewer && (len(rows) != 1 || rows[0].Attempt != 2 || rows[0].Token != loserToken):
					t.Errorf("node %d: loser applied %+v, want once, by attempt 2 under token %d", i+1, rows, loserToken)
				case !tc.loserNewer && len(rows) != 0:
					t.Errorf("node %d: fenced loser applied %+v", i+1, rows)
				}
			}
		})
	}
}

// TestCommitOnANodeThatLostTheClusterIsNotReportedNotCommitted: the node a
// transaction runs on is cut off from the others while fn runs. Its COMMIT
// then fails with error 1180 (error during COMMIT: not connected to the
// primary component). That error does not mean "not committed": the write
// set may have reached the other nodes before the cut and been committed
// there (the galera-multi-primary fault scenario saw it happen). Do must
// not return guard.ErrNotCommitted, which invites the caller to apply the
// work again; it settles the outcome from the fence row, which the cut-off
// node cannot read, and so returns guard.ErrOutcomeUnknown.
func TestCommitOnANodeThatLostTheClusterIsNotReportedNotCommitted(t *testing.T) {
	w := newWorld(t, 90*time.Second)
	const key = "cut:1"
	var rec recorder
	in := w.instance("cut", 2, instanceConfig{guard: guard.Options{Hooks: rec.hooks(), SettleTimeout: 3 * time.Second}})
	node := w.c.Nodes[2]
	rejoined := false
	rejoin := func() {
		if rejoined {
			return
		}
		rejoined = true
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := node.Rejoin(ctx); err != nil {
			t.Errorf("rejoin %s: %v", node.Name, err)
		}
	}
	t.Cleanup(rejoin)

	inFn, release := make(chan struct{}), make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- in.g.Do(w.ctx, key, func(ctx context.Context, tx *guard.Tx) error {
			if err := increment(ctx, tx, "cut"); err != nil {
				return err
			}
			if tx.Attempt() == 1 {
				close(inFn)
				<-release
			}
			return nil
		})
	}()
	<-inFn
	if err := node.Isolate(w.ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	err := <-res
	rejoin()

	rec.mu.Lock()
	commits := append([]guard.Step(nil), rec.commits...)
	rec.mu.Unlock()
	// The step's error is Do's verdict, which names the server's error as
	// text.
	if len(commits) == 0 || commits[0].Err == nil || !strings.Contains(commits[0].Err.Error(), "Error 1180") {
		t.Fatalf("COMMIT steps %+v: want attempt 1's COMMIT to fail with error 1180", commits)
	}
	if errors.Is(err, guard.ErrNotCommitted) {
		t.Fatalf("Do: %v; error 1180 on COMMIT leaves the outcome open", err)
	}
	if !errors.Is(err, guard.ErrOutcomeUnknown) {
		t.Fatalf("Do: %v, want guard.ErrOutcomeUnknown (the cut-off node cannot settle it)", err)
	}
	// Whatever happened, it happened once and the same on every node.
	got := w.counters()
	for i, n := range got {
		if n != got[0] || n > 1 {
			t.Errorf("node %d: counter %d (node 1: %d)", i+1, n, got[0])
		}
	}
}
