package guard_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// Three holders of a never-seen key at once, as after a split brain (three
// Lockers that do not share lock keys, one database). The first holder's
// transaction rolls back while the other two wait for its fence row. Had
// that transaction created the row, InnoDB would deadlock the two waiters
// (see fence.Ensure); Do makes the row outside the transaction that claims
// it, so both proceed without a retry, each committing or being fenced.
func TestFirstClaimRollbackDoesNotDeadlockWaiters(t *testing.T) {
	var mu sync.Mutex
	var retries []error
	hooks := guard.Hooks{OnRetry: func(_ string, _ int, err error) {
		mu.Lock()
		retries = append(retries, err)
		mu.Unlock()
	}}
	e := newEnv(t, envConfig{guard: &guard.Options{Hooks: hooks}})
	guardIn := func() *guard.Guard {
		l := redislock.New(e.rdb, &redislock.Options{Prefix: testenv.Prefix(t)})
		t.Cleanup(func() { _ = l.Close() })
		return guard.New(l, e.db, &guard.Options{Hooks: hooks, Namespace: e.prefix})
	}
	const key = "never-seen"
	ctx := context.Background()

	results := make(chan error, 2)
	err := e.g.Do(ctx, key, func(context.Context, *guard.Tx) error {
		for range 2 {
			g := guardIn()
			go func() {
				// The outer ctx: these are independent callers, not nested ones.
				results <- g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
					return increment(ctx, tx, 1)
				})
			}()
		}
		waitFor(t, "both claims to wait for the first holder's fence row", func() bool {
			return e.running("UPDATE "+fence.Table) == 2
		})
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("first holder: Do = %v, want errBoom", err)
	}
	committed := 0
	for range 2 {
		switch err := <-results; {
		case err == nil:
			committed++
		case errors.Is(err, guard.ErrFenced):
		default:
			t.Errorf("waiter: Do = %v, want nil or ErrFenced", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retries) != 0 {
		t.Fatalf("waiters retried %d time(s), first: %v; want no deadlock at all", len(retries), retries[0])
	}
	if committed == 0 || e.counter(1) != committed {
		t.Fatalf("%d committed, counter %d", committed, e.counter(1))
	}
}

// queryLog records the text of every COM_QUERY written on the connections
// it wraps.
type queryLog struct {
	mu sync.Mutex
	qs []string
}

func (l *queryLog) wrap(c net.Conn) net.Conn { return &loggedConn{Conn: c, l: l} }

// count returns how many recorded queries start with prefix.
func (l *queryLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.qs {
		if strings.HasPrefix(q, prefix) {
			n++
		}
	}
	return n
}

func (l *queryLog) reset() {
	l.mu.Lock()
	l.qs = nil
	l.mu.Unlock()
}

type loggedConn struct {
	net.Conn
	l *queryLog
}

func (c *loggedConn) Write(p []byte) (int, error) {
	// A MySQL packet: 3-byte length, sequence number, then COM_QUERY (3) and the text.
	if len(p) >= 5 && p[4] == 3 {
		c.l.mu.Lock()
		q := string(p[5:])
		c.l.qs = append(c.l.qs, q)
		if claim, ok := claimInCall(q); ok {
			c.l.qs = append(c.l.qs, claim)
		}
		c.l.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// claimInCall returns the claim statement that q, a CALL
// redfence_begin_claim(mark, X'<claim in hexadecimal>'), carries.
func claimInCall(q string) (string, bool) {
	const call = "CALL redfence_begin_claim("
	if !strings.HasPrefix(q, call) {
		return "", false
	}
	i := strings.Index(q, "X'")
	j := strings.LastIndex(q, "'")
	if i < 0 || j <= i+2 {
		return "", false
	}
	b, err := hex.DecodeString(q[i+2 : j])
	return string(b), err == nil
}

// The first Do on a key ever finds no fence row: its claim creates none,
// the row is made outside the transaction, and the same attempt claims
// again, without a retry or a failed step. Every later Do, also from a
// Guard that never saw the key, claims with one statement and reads
// nothing before its transaction.
func TestFirstDoCreatesFenceRowOutsideTx(t *testing.T) {
	var log queryLog
	var mu sync.Mutex
	var retries, failedSteps int
	hooks := guard.Hooks{
		OnRetry: func(string, int, error) { mu.Lock(); retries++; mu.Unlock() },
		OnStep: func(_ context.Context, s guard.Step) {
			if s.Err != nil {
				mu.Lock()
				failedSteps++
				mu.Unlock()
			}
		},
	}
	for _, opt := range []guard.Options{
		{}, {MaxBatch: 4}, {HandOff: guard.HandOffAtEnd, NoRelay: true}, {MaxBatch: 4, HandOff: guard.HandOffAtEnd, NoRelay: true},
	} {
		opt.Hooks = hooks
		name := fmt.Sprintf("MaxBatch=%d,HandOff=%v,NoRelay=%v", opt.MaxBatch, opt.HandOff, opt.NoRelay)
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envConfig{dial: log.wrap, guard: &opt})
			ctx := context.Background()
			const key = "fresh"
			claim := "UPDATE " + fence.Table
			ensure := "SELECT 1 FROM " + fence.Table
			log.reset()
			var token uint64
			var attempts []int
			must(t, e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
				token = tx.Token()
				attempts = append(attempts, tx.Attempt())
				return increment(ctx, tx, 1)
			}))
			if len(attempts) != 1 || attempts[0] != 1 {
				t.Fatalf("fn ran as attempts %v, want [1]: claiming again after making the row is not a new attempt", attempts)
			}
			if got := e.counter(1); got != 1 {
				t.Fatalf("counter %d, want 1", got)
			}
			if f, err := e.fence(key); err != nil || f.Token != token || f.Claims != 1 {
				t.Fatalf("fence row %+v, %v; want token %d claimed once", f, err, token)
			}
			if c, n := log.count(claim), log.count(ensure); c != 2 || n != 1 {
				t.Fatalf("first Do: %d claims and %d existence reads, want 2 and 1", c, n)
			}
			if log.count("INSERT INTO "+fence.Table) != 1 {
				t.Fatal("the fence row was not created once, outside the claim")
			}

			for i, g := range []*guard.Guard{e.g, guard.New(e.locker, e.db, &opt)} {
				log.reset()
				must(t, g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
				if c, n := log.count(claim), log.count(ensure); c != 1 || n != 0 {
					t.Fatalf("Do %d: %d claims and %d existence reads, want 1 and 0", i+2, c, n)
				}
			}
			if got := e.counter(1); got != 3 {
				t.Fatalf("counter %d, want 3", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if retries != 0 || failedSteps != 0 {
				t.Fatalf("%d retries and %d failed steps, want none", retries, failedSteps)
			}
		})
	}
}

// Making a new key's fence row can fail like any statement (here a lock wait
// timeout, behind another transaction's gap lock where the row goes). The
// attempt then fails as a retryable one, and the next attempt makes the row
// again and claims it.
func TestFenceRowMadeAgainAfterEnsureFails(t *testing.T) {
	for _, batch := range []int{0, 4} {
		t.Run(fmt.Sprintf("MaxBatch=%d", batch), func(t *testing.T) {
			e := newEnv(t, envConfig{})
			ctx := context.Background()
			const key = "gap"
			// A transaction holding the gap where the key's row would go.
			blocker, err := e.db.BeginTxx(ctx, nil)
			must(t, err)
			defer func() { _ = blocker.Rollback() }()
			var n int
			must(t, blocker.GetContext(ctx, &n, "SELECT COUNT(*) FROM "+fence.Table+" WHERE resource = ? FOR UPDATE", e.g.FenceResource(key)))

			mc, err := mysql.ParseDSN(e.dsn)
			must(t, err)
			if mc.Params == nil {
				mc.Params = map[string]string{}
			}
			mc.Params["innodb_lock_wait_timeout"] = "1"
			db, err := sqlx.Open("mysql", mc.FormatDSN())
			must(t, err)
			t.Cleanup(func() { _ = db.Close() })
			var retries []error
			var claims []guard.Step
			g := guard.New(e.locker, db, &guard.Options{MaxBatch: batch, Hooks: guard.Hooks{
				OnRetry: func(_ string, _ int, err error) {
					retries = append(retries, err)
					_ = blocker.Rollback() // the gap is free for the next attempt
				},
				OnStep: func(_ context.Context, s guard.Step) {
					if s.Kind == guard.StepClaim {
						claims = append(claims, s)
					}
				},
			}})
			var attempts []int
			err = g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error {
				attempts = append(attempts, tx.Attempt())
				return increment(ctx, tx, 1)
			})
			if err != nil {
				t.Fatalf("Do = %v, want nil (retries: %v)", err, retries)
			}
			if len(retries) != 1 || !fence.Retryable(retries[0]) {
				t.Fatalf("retries %v, want one, for the failed Ensure", retries)
			}
			if len(attempts) != 1 || attempts[0] != 2 {
				t.Fatalf("fn ran as attempts %v, want [2]", attempts)
			}
			if got := e.counter(1); got != 1 {
				t.Fatalf("counter %d, want 1", got)
			}
			// The failed Ensure is attempt 1's claim step, from its claim
			// to the lock wait timeout; attempt 2's claim step succeeds.
			if len(claims) != 2 || claims[0].Err == nil || claims[0].Attempt != 1 || claims[0].Duration < 900*time.Millisecond ||
				claims[1].Err != nil || claims[1].Attempt != 2 {
				t.Fatalf("claim steps %+v, want attempt 1 failing after the lock wait, then attempt 2", claims)
			}
		})
	}
}

// A key's first claim finds no row; making it may wait (here behind another
// transaction's gap lock, released after hold). The claim step covers it
// all: from the first claim to the claim that holds the new row.
func TestClaimStepCoversMakingTheRow(t *testing.T) {
	const hold = 300 * time.Millisecond
	var claims []guard.Step
	e := newEnv(t, envConfig{guard: &guard.Options{Hooks: guard.Hooks{OnStep: func(_ context.Context, s guard.Step) {
		if s.Kind == guard.StepClaim {
			claims = append(claims, s)
		}
	}}}})
	ctx := context.Background()
	const key = "slow-row"
	blocker, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	var n int
	must(t, blocker.GetContext(ctx, &n, "SELECT COUNT(*) FROM "+fence.Table+" WHERE resource = ? FOR UPDATE", e.g.FenceResource(key)))
	released := make(chan time.Time, 1)
	release := time.AfterFunc(hold, func() {
		released <- time.Now()
		_ = blocker.Rollback()
	})
	defer release.Stop()
	must(t, e.g.Do(ctx, key, func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	at := <-released
	// The step starts with the first claim, before the blocker lets the
	// row be made, and ends with the claim that holds it, after.
	if len(claims) != 1 || claims[0].Err != nil || !claims[0].Start.Before(at) || claims[0].Start.Add(claims[0].Duration).Before(at) {
		t.Fatalf("claim steps %+v, want one from before the row could be made (%v) to after", claims, at)
	}
}

// A fence row that is gone again right after it was made (here a trigger
// files every new row under another name) fails the attempt like any
// retryable failure, and Do gives up after MaxAttempts with an error that
// names the key and matches fence.ErrNoFence; fn never runs.
func TestFenceRowMissingAgainGivesUp(t *testing.T) {
	for _, batch := range []int{0, 4} {
		t.Run(fmt.Sprintf("MaxBatch=%d", batch), func(t *testing.T) {
			var retries int
			e := newEnv(t, envConfig{guard: &guard.Options{MaxBatch: batch, MaxAttempts: 3,
				BackoffMin: time.Millisecond, BackoffMax: time.Millisecond,
				Hooks: guard.Hooks{OnRetry: func(string, int, error) { retries++ }}}})
			testenv.MustExec(t, e.db, "CREATE TRIGGER rename_fence BEFORE INSERT ON "+fence.Table+
				" FOR EACH ROW SET NEW.resource = CONCAT(NEW.resource, '~')")
			ran := false
			err := e.g.Do(context.Background(), "vanishing", func(ctx context.Context, tx *guard.Tx) error {
				ran = true
				return nil
			})
			if !errors.Is(err, fence.ErrNoFence) || !strings.Contains(err.Error(), `"vanishing"`) || ran {
				t.Fatalf("Do = %v (fn ran: %v), want an error naming the key and matching fence.ErrNoFence, fn not run", err, ran)
			}
			if retries != 2 {
				t.Fatalf("%d retries, want 2 (MaxAttempts 3)", retries)
			}
		})
	}
}
