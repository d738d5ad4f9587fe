package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// stmtLog records the text of every query written on a MySQL connection
// (COM_QUERY packets), for tests that look at what a Do sends.
type stmtLog struct {
	mu    sync.Mutex
	texts []string
}

func (l *stmtLog) wrap(c netConn) netConn { return &stmtLogConn{netConn: c, l: l} }

func (l *stmtLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.texts
	l.texts = nil
	return t
}

type stmtLogConn struct {
	netConn
	l *stmtLog
}

func (c *stmtLogConn) Write(p []byte) (int, error) {
	if len(p) >= 5 && p[4] == 3 { // 3-byte length, sequence number, COM_QUERY
		c.l.mu.Lock()
		c.l.texts = append(c.l.texts, string(p[5:]))
		c.l.mu.Unlock()
	}
	return c.netConn.Write(p)
}

// A DoRead costs one MySQL round trip fewer than the same transaction with
// the read as fn's first statement, and with arguments, on a pool that
// prepares statements, two: the read goes with the claim, its arguments
// bound by the server. What it reads is what that statement reads, and fn
// starts with it.
func TestDoReadSendsTheReadWithTheClaim(t *testing.T) {
	e, f := rideEnv(t, guard.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		query string
		args  []any
		saved int64
	}{
		{"no arguments", "SELECT n FROM counters WHERE id = 1", nil, 1},
		{"arguments", "SELECT n FROM counters WHERE id = ?", []any{1}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			update := func(ctx context.Context, tx *guard.Tx, n int) error {
				_, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = 1", n+1)
				return err
			}
			start := e.counter(1)
			var viaDo int
			do := roundTripsOf(t, e, f, "k", func(ctx context.Context, tx *guard.Tx) error {
				if err := tx.GetContext(ctx, &viaDo, c.query, c.args...); err != nil {
					return err
				}
				return update(ctx, tx, viaDo)
			})
			waitFor(t, "idle pool", func() bool { return e.db.Stats().InUse == 0 })
			before := f.roundTrips.Load()
			var viaRead, inFn int
			must(t, e.g.DoRead(ctx, "k", guard.ReadOne(&viaRead, c.query, c.args...), func(ctx context.Context, tx *guard.Tx) error {
				inFn = viaRead
				return update(ctx, tx, viaRead)
			}))
			waitFor(t, "idle pool", func() bool { return e.db.Stats().InUse == 0 })
			if read := f.roundTrips.Load() - before; read != do-c.saved {
				t.Fatalf("round trips: %d with DoRead, %d with the read in fn; want %d fewer", read, do, c.saved)
			}
			if viaDo != start || inFn != start+1 || e.counter(1) != start+2 {
				t.Fatalf("read %d through Do and %d in DoRead's fn, counter %d; want %d, %d, %d", viaDo, inFn, e.counter(1), start, start+1, start+2)
			}
		})
	}
}

// On a hot key every DoRead but the first on a key sends its read with its
// claim, relayed transactions included: the claim adds no statement of its
// own, and the next holder rarely waits for a BEGIN.
func TestDoReadRidesOnAHotKey(t *testing.T) {
	var log stmtLog
	e := newEnv(t, envConfig{dial: log.wrap})
	ctx := context.Background()
	const callers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var n int
				errs <- e.g.DoRead(ctx, "k", guard.ReadOne(&n, "SELECT n FROM counters WHERE id = ?", 1), func(ctx context.Context, tx *guard.Tx) error {
					_, err := tx.ExecContext(ctx, "UPDATE counters SET n = ? WHERE id = 1", n+1)
					return err
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	if n := e.counter(1); n != callers*each {
		t.Fatalf("counter = %d after %d increments", n, callers*each)
	}
	carried, begins := 0, 0
	for _, q := range log.take() {
		if strings.Contains(q, "redfence_begin_claim(") && strings.Contains(q, "EXECUTE IMMEDIATE") {
			carried++
		}
		if strings.HasPrefix(q, "START TRANSACTION") {
			begins++
		}
	}

	// The key's first call finds its fence row, and sends its read after.
	if carried != callers*each-1 {
		t.Fatalf("%d reads sent with the claim; want %d", carried, callers*each-1)
	}
	// Each holder's COMMIT chains the transaction of a later caller while
	// more callers are under way than transactions are parked or on their
	// way for them: a holder granted the lock finds one and claims at once,
	// and the pool sees a BEGIN now and then, not one every other call (40).
	// How often a holder is granted before the chained transaction is
	// parked depends on scheduling: 5–6 alone, 5–10 beside another test
	// process under -race.
	t.Logf("%d transactions begun on the pool", begins)
	if limit := 2 * callers; begins > limit {
		t.Fatalf("%d transactions begun on the pool for %d calls by %d callers; want at most %d", begins, callers*each, callers, limit)
	}
}

// fn does not run for a DoRead that is fenced: the read went with the
// stale claim, did not run, and left the destination as it was.
func TestDoReadFencedCallsNoFn(t *testing.T) {
	e, _ := rideEnv(t, guard.Options{})
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	testenv.MustExec(t, e.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", future, e.g.FenceResource("k"))
	n, called := -1, false
	err := e.g.DoRead(context.Background(), "k", guard.ReadOne(&n, "SELECT n FROM counters WHERE id = ?", 1), func(ctx context.Context, tx *guard.Tx) error {
		called = true
		return nil
	})
	if !errors.Is(err, guard.ErrFenced) || called || n != -1 {
		t.Fatalf("DoRead = %v, fn called %v, destination %d; want ErrFenced, false, -1", err, called, n)
	}
}

// What DoRead's read returns is what it returns as fn's first statement:
// a struct by its columns, every row of ReadAll (from an empty slice on
// each call, leaving a slice kept from an earlier call as it was),
// sql.ErrNoRows for a missing row of ReadOne (fn not called), no row of
// ReadAll, none for a SELECT … INTO, and sqlx's refusal of sql.RawBytes.
func TestDoReadResults(t *testing.T) {
	type row struct {
		ID int `db:"id"`
		N  int `db:"n"`
	}
	type outcome struct {
		one             row
		all, none, kept []row
		into            []int
		missing, raw    error
		missingFnRan    bool
	}
	run := func(opt guard.Options) outcome {
		e, _ := rideEnv(t, opt)
		testenv.MustExec(t, e.db, "UPDATE counters SET n = 7 WHERE id = 2")
		ctx := context.Background()
		nop := func(context.Context, *guard.Tx) error { return nil }
		var o outcome
		must(t, e.g.DoRead(ctx, "k", guard.ReadOne(&o.one, "SELECT id, n FROM counters WHERE id = ?", 2), nop))
		o.all = []row{{ID: 99}}
		for i := range 2 {
			must(t, e.g.DoRead(ctx, "k", guard.ReadAll(&o.all, "SELECT id, n FROM counters WHERE id >= ? ORDER BY id", 1+i), nop))
			if i == 0 {
				o.kept = o.all
			}
		}
		o.into = []int{42}
		must(t, e.g.DoRead(ctx, "k", guard.ReadAll(&o.into, "SELECT n INTO @x FROM counters WHERE id = ?", 1), nop))
		var raw sql.RawBytes
		o.raw = e.g.DoRead(ctx, "k", guard.ReadOne(&raw, "SELECT id FROM counters WHERE id = ?", 1), nop)
		must(t, e.g.DoRead(ctx, "k", guard.ReadAll(&o.none, "SELECT id, n FROM counters WHERE id > ?", 100), nop))
		var m int
		o.missing = e.g.DoRead(ctx, "k", guard.ReadOne(&m, "SELECT n FROM counters WHERE id = ?", 100), func(context.Context, *guard.Tx) error {
			o.missingFnRan = true
			return nil
		})
		return o
	}
	carried := run(guard.Options{})
	alone := run(guard.Options{MaxBatch: 4}) // a batch's members send their reads themselves
	for name, o := range map[string]outcome{"with the claim": carried, "in fn": alone} {
		if o.one != (row{ID: 2, N: 7}) || len(o.all) != 1 || o.all[0] != (row{ID: 2, N: 7}) || len(o.none) != 0 ||
			len(o.kept) != 2 || o.kept[0] != (row{ID: 1}) || len(o.into) != 0 {
			t.Errorf("%s: one %v, all %v (after %v), none %v, into %v", name, o.one, o.all, o.kept, o.none, o.into)
		}
		if o.raw == nil || !strings.Contains(o.raw.Error(), "RawBytes") {
			t.Errorf("%s: ReadOne into sql.RawBytes: %v, want sqlx's refusal", name, o.raw)
		}
		if !errors.Is(o.missing, sql.ErrNoRows) || o.missingFnRan {
			t.Errorf("%s: missing row: %v, fn ran %v; want sql.ErrNoRows and no fn", name, o.missing, o.missingFnRan)
		}
	}
}

// A Read that is not one is refused before anything is locked or written,
// with ErrInvalidRead; a nil fn with ErrNilFunc.
func TestDoReadInvalid(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	var n int
	var s []int
	nop := func(context.Context, *guard.Tx) error { return nil }
	for name, r := range map[string]guard.Read{
		"zero":             {},
		"empty query":      guard.ReadOne(&n, ""),
		"nil destination":  guard.ReadOne(nil, "SELECT 1"),
		"not a pointer":    guard.ReadOne(n, "SELECT 1"),
		"nil pointer":      guard.ReadOne((*int)(nil), "SELECT 1"),
		"ReadAll no slice": guard.ReadAll(&n, "SELECT 1"),
	} {
		if err := e.g.DoRead(ctx, "fresh", r, nop); !errors.Is(err, guard.ErrInvalidRead) {
			t.Errorf("%s: DoRead = %v, want ErrInvalidRead", name, err)
		}
	}
	if err := e.g.DoRead(ctx, "fresh", guard.ReadAll(&s, "SELECT 1"), nil); !errors.Is(err, guard.ErrNilFunc) {
		t.Errorf("nil fn: DoRead = %v, want ErrNilFunc", err)
	}
	if _, err := e.fence("fresh"); !errors.Is(err, fence.ErrNoFence) {
		t.Fatalf("fence row of a refused call: %v, want none", err)
	}
}

// A read sent with the claim that times out waiting for a row lock fails
// the attempt as fn's statement would: Do runs it again, read and all, and
// fn runs once, with what the second read saw.
func TestDoReadRetriedAfterLockWaitTimeout(t *testing.T) {
	e := newEnv(t, envConfig{})
	mc, err := mysql.ParseDSN(e.dsn)
	must(t, err)
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	mc.Params["innodb_lock_wait_timeout"] = "1"
	var log stmtLog
	db := openDB(t, mc.FormatDSN(), log.wrap)
	ctx := context.Background()
	blocker, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer func() { _ = blocker.Rollback() }()
	var retries, calls atomic.Int64
	g := guard.New(e.locker, db, &guard.Options{BackoffMin: time.Millisecond, Hooks: guard.Hooks{
		OnRetry: func(_ string, _ int, err error) {
			if retries.Add(1) == 1 && mysqlErrno(err) == 1205 {
				_ = blocker.Commit()
			}
		},
	}})
	must(t, g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return nil })) // the Guard sees the key's fence row
	_, err = blocker.ExecContext(ctx, "UPDATE counters SET n = 5 WHERE id = 1")
	must(t, err)
	log.take()
	var n, seen int
	must(t, g.DoRead(ctx, "k", guard.ReadOne(&n, "SELECT n FROM counters WHERE id = ? FOR UPDATE", 1), func(ctx context.Context, tx *guard.Tx) error {
		calls.Add(1)
		seen = n
		return nil
	}))
	if retries.Load() != 1 || calls.Load() != 1 || seen != 5 {
		t.Fatalf("%d retries, fn ran %d times with %d; want 1, 1 and 5", retries.Load(), calls.Load(), seen)
	}
	carried := 0
	for _, q := range log.take() {
		if strings.Contains(q, "EXECUTE IMMEDIATE") {
			carried++
		}
	}
	if carried != 2 {
		t.Fatalf("%d reads sent with the claim; want 2 (each attempt's)", carried)
	}
}

// On a pool whose sessions set sql_select_limit, which a compound statement
// does not obey, the read is sent on its own, and reads what it reads in fn.
func TestDoReadObeysSQLSelectLimit(t *testing.T) {
	e, f := rideEnv(t, guard.Options{})
	var log stmtLog
	db := openDB(t, e.dsn+dsnSep(e.dsn)+"sql_select_limit=1", func(c netConn) netConn { return log.wrap(f.wrap(c)) })
	g := guard.New(e.locker, db, nil)
	ctx := context.Background()
	must(t, g.Do(ctx, "k", func(context.Context, *guard.Tx) error { return nil }))
	var ids []int
	must(t, g.DoRead(ctx, "k", guard.ReadAll(&ids, "SELECT id FROM counters ORDER BY id"), func(context.Context, *guard.Tx) error { return nil }))
	if len(ids) != 1 {
		t.Fatalf("read %v; want one row, as sql_select_limit=1 says", ids)
	}
	for _, q := range log.take() {
		if strings.Contains(q, "EXECUTE IMMEDIATE") {
			t.Fatalf("the read went with the claim on a pool that sets sql_select_limit: %.80s", q)
		}
	}
}
