package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// rideEnv is an env whose MySQL connections count round trips, and whose key "k" already has
// its fence row (a claim rides only for a key whose row the Guard saw).
func rideEnv(t *testing.T, opt guard.Options) (*env, *connFaults) {
	t.Helper()
	f := newConnFaults()
	e := newEnv(t, envConfig{guard: &opt, dial: f.wrap})
	must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))
	return e, f
}

// roundTripsOf returns the MySQL round trips of one Do on key, counted
// once every connection is back in the pool (the release of a committed
// transaction follows Do).
func roundTripsOf(t *testing.T, e *env, f *connFaults, key string, fn func(context.Context, *guard.Tx) error) int64 {
	t.Helper()
	waitFor(t, "idle pool", func() bool { return e.db.Stats().InUse == 0 })
	before := f.roundTrips.Load()
	must(t, e.g.Do(context.Background(), key, fn))
	waitFor(t, "idle pool", func() bool { return e.db.Stats().InUse == 0 })
	return f.roundTrips.Load() - before
}

// The claim rides with fn's first statement: a Do whose fn sends one
// statement costs one MySQL round trip fewer than with the claim on its
// own, and with arguments, on a pool that prepares statements on the
// server, two (the statement goes with its arguments written in, where the
// driver would prepare it first). The statement's result is what the
// server reported for it.
func TestClaimRidesWithFirstStatement(t *testing.T) {
	alone, fa := rideEnv(t, guard.Options{ClaimWithFirstStatement: false})
	rides, fr := rideEnv(t, guard.Options{ClaimWithFirstStatement: true})
	for _, c := range []struct {
		name  string
		saved int64
		fn    func(context.Context, *guard.Tx) error
	}{
		{"Exec", 1, func(ctx context.Context, tx *guard.Tx) error {
			res, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				t.Errorf("RowsAffected = %d, %v; want 1", n, err)
			}
			if id, err := res.LastInsertId(); err != nil || id != 0 {
				t.Errorf("LastInsertId = %d, %v; want 0", id, err)
			}
			return nil
		}},
		{"Get", 1, func(ctx context.Context, tx *guard.Tx) error {
			var n int
			if err := tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = 1"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
			return err
		}},
		{"Exec with arguments", 2, func(ctx context.Context, tx *guard.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + ? WHERE id = ?", 1, 1)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := roundTripsOf(t, alone, fa, "k", c.fn)
			r := roundTripsOf(t, rides, fr, "k", c.fn)
			if r != a-c.saved {
				t.Fatalf("round trips: %d with the claim riding, %d with it alone; want %d fewer", r, a, c.saved)
			}
		})
	}
	if n := rides.counter(1); n != 3 {
		t.Fatalf("counter = %d, want 3", n)
	}
}

// What a statement that carried the claim returns is what it returns sent
// on its own: rows, affected rows, insert ids, NULL, quotes in strings,
// the column's collation, and arguments that cannot be written into the
// text (sent after the claim).
func TestRiddenStatementResultsMatch(t *testing.T) {
	type row struct {
		ID   int64          `db:"id"`
		Name string         `db:"name"`
		Note sql.NullString `db:"note"`
	}
	type outcome struct {
		affected, insertID int64
		got                []row
		one                row
		count              int
		err                string // of a statement whose error is its result
	}
	run := func(opt guard.Options, first string) outcome {
		e, _ := rideEnv(t, opt)
		testenv.MustExec(t, e.db, "CREATE TABLE people (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(40) COLLATE utf8mb4_general_ci, note VARCHAR(40) NULL)")
		testenv.MustExec(t, e.db, "INSERT INTO people (name, note) VALUES ('alice', NULL), ('O''Brien', 'x'), ('back\\\\slash', 'y')")
		var o outcome
		must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
			switch first {
			case "update":
				res, err := tx.ExecContext(ctx, "UPDATE people SET id = LAST_INSERT_ID(id + 10) WHERE name = ?", "O'Brien")
				if err != nil {
					return err
				}
				o.affected, _ = res.RowsAffected()
				o.insertID, _ = res.LastInsertId()
			case "delete":
				res, err := tx.ExecContext(ctx, "DELETE FROM people WHERE name = ? OR note <=> ?", "ALICE", nil)
				if err != nil {
					return err
				}
				o.affected, _ = res.RowsAffected()
				o.insertID, _ = res.LastInsertId()
			case "select":
				if err := tx.SelectContext(ctx, &o.got, "SELECT id, name, note FROM people WHERE id > ? ORDER BY id", 0.5); err != nil {
					return err
				}
			case "get":
				if err := tx.GetContext(ctx, &o.one, "SELECT id, name, note FROM people WHERE name = ?", "back\\slash"); err != nil {
					return err
				}
			case "count":
				if err := tx.GetContext(ctx, &o.count, "SELECT COUNT(*) FROM people WHERE name = ?", "ALICE"); err != nil {
					return err
				}
			case "select-into":
				// No result set: sqlx's Select empties the slice and
				// returns no error, into structs and into values alike.
				o.got = []row{{ID: 99}}
				if err := tx.SelectContext(ctx, &o.got, "SELECT name INTO @who FROM people WHERE id = ?", 1); err != nil {
					o.err = err.Error()
				}
			case "select-into-values":
				names := []string{"kept"}
				if err := tx.SelectContext(ctx, &names, "SELECT name INTO @who FROM people WHERE id = ?", 2); err != nil {
					o.err = err.Error()
				}
				o.count = len(names)
			case "select-into-non-slice":
				var notSlice int
				if err := tx.SelectContext(ctx, &notSlice, "SELECT name INTO @who FROM people WHERE id = ?", 3); err != nil {
					o.err = err.Error()
				}
			case "get-into":
				if err := tx.GetContext(ctx, &o.one, "SELECT name INTO @who FROM people WHERE id = ?", 1); err != nil {
					o.err = err.Error()
				}
			case "queryx":
				rows, err := tx.QueryxContext(ctx, "SELECT id, name, note FROM people WHERE id <> ? ORDER BY id", int8(2))
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var r row
					if err := rows.StructScan(&r); err != nil {
						return err
					}
					o.got = append(o.got, r)
				}
				return rows.Err()
			}
			return nil
		}))
		return o
	}
	for _, first := range []string{"update", "delete", "select", "get", "count", "queryx", "select-into", "select-into-values", "select-into-non-slice", "get-into"} {
		t.Run(first, func(t *testing.T) {
			want := run(guard.Options{ClaimWithFirstStatement: false}, first)
			got := run(guard.Options{ClaimWithFirstStatement: true}, first)
			if !sameOutcome(got.got, want.got) || got.affected != want.affected || got.insertID != want.insertID || got.one != want.one || got.count != want.count || got.err != want.err {
				t.Fatalf("riding the claim: %+v; sent alone: %+v", got, want)
			}
		})
	}
}

func sameOutcome[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A stale token is fenced when the claim rides: fn's first statement
// returns the refusal and does not run, and Do returns ErrFenced.
func TestRiddenClaimOfStaleTokenIsFenced(t *testing.T) {
	e, _ := rideEnv(t, guard.Options{ClaimWithFirstStatement: true})
	ctx := context.Background()
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	testenv.MustExec(t, e.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", future, e.g.FenceResource("k"))
	var stmtErr error
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		_, stmtErr = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
		return stmtErr
	})
	if !errors.Is(err, guard.ErrFenced) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Do = %v, want ErrFenced", err)
	}
	if !errors.Is(stmtErr, guard.ErrFenced) {
		t.Fatalf("fn's first statement = %v, want ErrFenced", stmtErr)
	}
	if n := e.counter(1); n != 0 {
		t.Fatalf("counter = %d: the statement that carried a stale claim ran", n)
	}
}

// Until the claim holds, the *sqlx.Tx that Tx embeds is a closed
// transaction: what fn sends there before its first Tx statement fails
// with sql.ErrTxDone and runs nothing. It can neither read a snapshot older
// than the last holder's COMMIT nor write, or commit, before the claim.
// Once the claim rode, it is the attempt's transaction.
func TestEmbeddedTxClosedUntilRiddenClaimHolds(t *testing.T) {
	e, _ := rideEnv(t, guard.Options{ClaimWithFirstStatement: true})
	ctx := context.Background()
	var before [3]error
	var seen int
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		var n int
		before[0] = tx.Tx.GetContext(ctx, &n, "SELECT n FROM counters WHERE id = 1")
		_, before[1] = tx.Tx.ExecContext(ctx, "UPDATE counters SET n = n + 100 WHERE id = 1")
		_, before[2] = tx.Tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS stray (id INT)")
		if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		return tx.Tx.GetContext(ctx, &seen, "SELECT n FROM counters WHERE id = 1")
	}))
	for i, err := range before {
		if !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("statement %d through the embedded *sqlx.Tx before the claim: %v, want sql.ErrTxDone", i, err)
		}
	}
	if seen != 1 || e.counter(1) != 1 {
		t.Fatalf("after the claim the embedded *sqlx.Tx read %d, counter %d; want 1 and 1", seen, e.counter(1))
	}
	var tables int
	must(t, e.db.Get(&tables, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'stray'"))
	if tables != 0 {
		t.Fatal("a statement sent before the claim ran")
	}
}

// A stale holder whose fn sends statements from two goroutines: the one
// that waits while the other's statement carries the claim gets the claim's
// refusal, and runs nothing (a MyISAM table keeps what a rollback would
// undo).
func TestSecondStatementWaitsForTheRiddenClaim(t *testing.T) {
	e, _ := rideEnv(t, guard.Options{ClaimWithFirstStatement: true})
	ctx := context.Background()
	testenv.MustExec(t, e.db, "CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(20)) ENGINE=MyISAM")
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	testenv.MustExec(t, e.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", future, e.g.FenceResource("k"))
	newer, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	defer newer.Rollback()
	_, err = newer.ExecContext(ctx, "SELECT token FROM "+fence.Table+" WHERE resource = ? FOR UPDATE", e.g.FenceResource("k"))
	must(t, err)
	var first, second error
	err = e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		firstDone := make(chan struct{})
		go func() {
			defer close(firstDone)
			_, first = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
		}()
		waitFor(t, "the ridden claim to wait for the fence row", func() bool {
			var n int
			_ = e.db.Get(&n, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'UPDATE "+fence.Table+" SET%'")
			return n > 0
		})
		secondDone := make(chan struct{})
		go func() {
			defer close(secondDone)
			_, second = tx.ExecContext(ctx, "INSERT INTO audit (what) VALUES (?)", "stale")
		}()
		time.Sleep(50 * time.Millisecond) // the second statement waits for the claim meanwhile
		must(t, newer.Commit())
		<-firstDone
		<-secondDone
		return errors.Join(first, second)
	})
	if !errors.Is(err, guard.ErrFenced) || !errors.Is(first, guard.ErrFenced) || !errors.Is(second, guard.ErrFenced) {
		t.Fatalf("Do = %v; first statement %v; second %v; want ErrFenced for all", err, first, second)
	}
	var audit int
	must(t, e.db.Get(&audit, "SELECT COUNT(*) FROM audit"))
	if audit != 0 || e.counter(1) != 0 {
		t.Fatalf("%d audit rows, counter %d: a statement of a stale holder ran", audit, e.counter(1))
	}
}

// Under READ COMMITTED, too, a claim rides (nothing can read before it).
func TestRideUnderReadCommitted(t *testing.T) {
	f := newConnFaults()
	opt := guard.Options{ClaimWithFirstStatement: true}
	e := newEnv(t, envConfig{guard: &opt})
	rc := openDB(t, e.dsn+rcParam(e.dsn), f.wrap)
	g := guard.New(e.locker, rc, &opt)
	ctx := context.Background()
	var calls atomic.Int64
	var isolation string
	for range 3 {
		must(t, g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
			calls.Add(1)
			if err := increment(ctx, tx, 1); err != nil {
				return err
			}
			return tx.GetContext(ctx, &isolation, "SELECT @@tx_isolation")
		}))
	}
	if n, c := e.counter(1), calls.Load(); n != 3 || c != 3 || isolation != "READ-COMMITTED" {
		t.Fatalf("counter %d, fn ran %d times, isolation %s; want 3, 3, READ-COMMITTED", n, c, isolation)
	}
}

func rcParam(dsn string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return sep + "tx_isolation=%27READ-COMMITTED%27"
}

// What cannot ride goes as it would without the option, after the claim
// on its own: an argument too long to write into the text, a DELETE …
// RETURNING, a '?' inside a quoted string (whose argument would otherwise
// be spliced into the literal), and rows on a pool made with Unsafe keep
// tolerating columns the destination lacks.
func TestWhatCannotRideGoesAsItIs(t *testing.T) {
	type onlyN struct {
		N int `db:"n"`
	}
	big := strings.Repeat("x", 9<<20)
	for _, c := range []struct {
		name   string
		unsafe bool
		fn     func(ctx context.Context, tx *guard.Tx) (string, error)
	}{
		{"long argument", false, func(ctx context.Context, tx *guard.Tx) (string, error) {
			res, err := tx.ExecContext(ctx, "UPDATE docs SET body = ? WHERE id = ?", big, 1)
			if err != nil {
				return "", err
			}
			n, _ := res.RowsAffected()
			return fmt.Sprint("affected ", n), nil
		}},
		{"returning", false, func(ctx context.Context, tx *guard.Tx) (string, error) {
			res, err := tx.ExecContext(ctx, "DELETE FROM docs WHERE id = ? RETURNING id, body", 2)
			if err != nil {
				return "", err
			}
			n, _ := res.RowsAffected()
			id, _ := res.LastInsertId()
			return fmt.Sprint("affected ", n, " id ", id), nil
		}},
		{"question mark in a literal", false, func(ctx context.Context, tx *guard.Tx) (string, error) {
			var s []string
			err := tx.SelectContext(ctx, &s, "SELECT '?' UNION ALL SELECT 'z'", "' UNION ALL SELECT CURRENT_USER() UNION ALL SELECT '")
			return fmt.Sprintf("%q %v", s, err), nil
		}},
		{"a '?' in a comment that opens with /*/", false, func(ctx context.Context, tx *guard.Tx) (string, error) {
			_, err := tx.ExecContext(ctx, "DELETE FROM docs WHERE id = ? /*/ note: ? */", 1, "*/ OR 1=1 /*")
			return fmt.Sprint(err), nil
		}},
		{"unsigned argument", false, func(ctx context.Context, tx *guard.Tx) (string, error) {
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n - ? WHERE id = ?", uint64(5), 1)
			var me *mysql.MySQLError
			if errors.As(err, &me) {
				return fmt.Sprint("error ", me.Number), nil // the message names the test's database
			}
			return fmt.Sprint(err), nil
		}},
		{"unsafe pool", true, func(ctx context.Context, tx *guard.Tx) (string, error) {
			var one onlyN
			var all []onlyN
			if err := tx.GetContext(ctx, &one, "SELECT id, n FROM counters WHERE id = ?", 1); err != nil {
				return "", err
			}
			err := tx.SelectContext(ctx, &all, "SELECT id, n FROM counters ORDER BY id")
			return fmt.Sprint(one, all), err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(ride bool) string {
				opt := guard.Options{ClaimWithFirstStatement: ride}
				e, _ := rideEnv(t, opt)
				testenv.MustExec(t, e.db, "CREATE TABLE docs (id INT PRIMARY KEY, body LONGTEXT)")
				testenv.MustExec(t, e.db, "INSERT INTO docs VALUES (1, ''), (2, 'b')")
				g := e.g
				if c.unsafe {
					g = guard.New(e.locker, e.db.Unsafe(), &opt)
					must(t, g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))
				}
				var out string
				err := g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
					var err error
					out, err = c.fn(ctx, tx)
					return err
				})
				return fmt.Sprintf("%.200s | Do = %v", out, err)
			}
			if alone, ridden := run(false), run(true); alone != ridden {
				t.Fatalf("with the option: %s\nwithout: %s", ridden, alone)
			}
		})
	}
}

// fn's first statement carries the claim as a prepared statement, which
// holds one statement: a text with a second one is refused by the server
// and nothing of it runs.
func TestRiddenStatementIsOneStatement(t *testing.T) {
	e, _ := rideEnv(t, guard.Options{ClaimWithFirstStatement: true})
	err := e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1; UPDATE counters SET n = n + 1 WHERE id = 2")
		return err
	})
	if err == nil {
		t.Fatal("Do = nil; a text of two statements ran")
	}
	if a, b := e.counter(1), e.counter(2); a != 0 || b != 0 {
		t.Fatalf("counters = %d, %d after a refused text", a, b)
	}
}

// fn that sends no statement: the claim goes on its own before COMMIT.
// fn that fails before its first statement: nothing is claimed.
func TestRideWithoutStatements(t *testing.T) {
	e, _ := rideEnv(t, guard.Options{ClaimWithFirstStatement: true})
	ctx := context.Background()
	before, err := e.fence("k")
	must(t, err)
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))
	after, err := e.fence("k")
	must(t, err)
	if after.Token <= before.Token {
		t.Fatalf("fence token %d after a Do without statements, was %d: not claimed", after.Token, before.Token)
	}
	boom := errors.New("boom")
	if err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want boom", err)
	}
	last, err := e.fence("k")
	must(t, err)
	if last.Token != after.Token {
		t.Fatalf("fence token moved to %d for a fn that failed before its first statement", last.Token)
	}
	e.assertFree("k")
}

var _ net.Conn // the dial wrappers take and return net.Conn

// A claim that rode is reported as a step of its own, before fn's, as one
// sent before fn would be; a fenced one with its error.
func TestRiddenClaimSteps(t *testing.T) {
	var steps []string
	opt := guard.Options{ClaimWithFirstStatement: true, Hooks: guard.Hooks{OnStep: func(_ context.Context, s guard.Step) {
		mark := ""
		if s.Err != nil {
			mark = "!"
		}
		steps = append(steps, s.Kind.String()+mark)
	}}}
	e, _ := rideEnv(t, opt)
	steps = nil
	done := make(chan struct{})
	must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
		// The first statement from a goroutine of fn's: the hook still runs
		// on Do's.
		var err error
		go func() {
			defer close(done)
			err = increment(ctx, tx, 1)
		}()
		<-done
		return err
	}))
	if got := strings.Join(steps, " "); got != "lock claim fn commit unlock" {
		t.Fatalf("steps %q, want %q", got, "lock claim fn commit unlock")
	}
}

// What Tx reads of the pool's driver while a claim rides (sqlx's named
// helpers ask for DriverName) does not race with the claim that replaces
// the embedded *sqlx.Tx (run with -race).
func TestDriverNameWhileTheClaimRides(t *testing.T) {
	e, _ := rideEnv(t, guard.Options{ClaimWithFirstStatement: true})
	for range 10 {
		must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
			done := make(chan string)
			go func() { done <- tx.DriverName() + tx.Rebind("?") }()
			err := increment(ctx, tx, 1)
			if got := <-done; got != "mysql?" {
				t.Errorf("DriverName and Rebind: %q", got)
			}
			return err
		}))
	}
}

// A claim that rode is timed as its own round trip, not as fn, and
// OnFenced runs on Do's goroutine as for a claim sent before fn.
func TestRiddenClaimStepTimingAndFencedHook(t *testing.T) {
	var claim, fnStep guard.Step
	var hookG, doG string
	opt := guard.Options{ClaimWithFirstStatement: true, Hooks: guard.Hooks{
		OnStep: func(_ context.Context, s guard.Step) {
			switch s.Kind {
			case guard.StepClaim:
				claim = s
			case guard.StepFn:
				fnStep = s
			}
		},
		OnFenced: func(string, uint64, uint64) { hookG = goroutine() },
	}}
	e, _ := rideEnv(t, opt)
	ctx := context.Background()
	must(t, e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
		return nil
	}))
	if claim.Duration >= 100*time.Millisecond || fnStep.Duration < 200*time.Millisecond {
		t.Fatalf("claim step %v, fn step %v: the claim was timed to the end of fn", claim.Duration, fnStep.Duration)
	}
	future := uint64(time.Now().Add(time.Hour).UnixMicro())
	testenv.MustExec(t, e.db, "UPDATE "+fence.Table+" SET token = ? WHERE resource = ?", future, e.g.FenceResource("k"))
	doG = goroutine()
	err := e.g.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error {
		done := make(chan error)
		go func() {
			_, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
			done <- err
		}()
		return <-done
	})
	if !errors.Is(err, guard.ErrFenced) || hookG != doG {
		t.Fatalf("Do = %v; OnFenced on goroutine %s, Do on %s", err, hookG, doG)
	}
}

func goroutine() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

// The server binds the arguments of a statement that carried the claim to
// its placeholders: its columns are named as when it is sent on its own,
// and a value that looks like SQL stays a value.
func TestRiddenStatementBindsItsArguments(t *testing.T) {
	run := func(ride bool) string {
		e, _ := rideEnv(t, guard.Options{ClaimWithFirstStatement: ride})
		var out string
		must(t, e.g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
			rows, err := tx.QueryxContext(ctx, "SELECT COALESCE(n, ?), ?, ? = 'A' FROM counters WHERE id = ?", 0, "' OR 1=1 -- ", "a", 1)
			if err != nil {
				return err
			}
			defer rows.Close()
			cols, err := rows.Columns()
			if err != nil {
				return err
			}
			for rows.Next() {
				v, err := rows.SliceScan()
				if err != nil {
					return err
				}
				out = fmt.Sprintf("%q %s", cols, v)
			}
			return rows.Err()
		}))
		return out
	}
	if alone, ridden := run(false), run(true); alone != ridden {
		t.Fatalf("with the option: %s\nwithout: %s", ridden, alone)
	}
}

// What the session sets for its statements holds for one that carried the
// claim: sql_select_limit (which a compound statement ignores: on a pool
// that sets it, claims go on their own), LAST_INSERT_ID() after an UPDATE that
// set none (still the claim's), and LIMIT with a negative argument (the
// driver's bound value reads as unsigned; a negative value does not ride).
func TestRiddenStatementKeepsTheSession(t *testing.T) {
	for _, c := range []struct {
		name, param string
		fn          func(ctx context.Context, tx *guard.Tx) (string, error)
	}{
		{"sql_select_limit", "sql_select_limit=1", func(ctx context.Context, tx *guard.Tx) (string, error) {
			var ids []int
			err := tx.SelectContext(ctx, &ids, "SELECT id FROM counters WHERE id > ? ORDER BY id", 0)
			return fmt.Sprint(ids), err
		}},
		{"LAST_INSERT_ID", "", func(ctx context.Context, tx *guard.Tx) (string, error) {
			if _, err := tx.ExecContext(ctx, "UPDATE counters SET n = n + 1 WHERE id = ?", 1); err != nil {
				return "", err
			}
			var id uint64
			err := tx.GetContext(ctx, &id, "SELECT LAST_INSERT_ID()")
			return fmt.Sprint(id), err
		}},
		{"negative LIMIT", "", func(ctx context.Context, tx *guard.Tx) (string, error) {
			var ids []int
			err := tx.SelectContext(ctx, &ids, "SELECT id FROM counters ORDER BY id LIMIT ?", -1)
			return fmt.Sprint(ids), err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(ride bool) string {
				opt := guard.Options{ClaimWithFirstStatement: ride}
				e, f := rideEnv(t, opt)
				g := e.g
				if c.param != "" {
					g = guard.New(e.locker, openDB(t, e.dsn+dsnSep(e.dsn)+c.param, f.wrap), &opt)
					must(t, g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))
				}
				var out string
				err := g.Do(context.Background(), "k", func(ctx context.Context, tx *guard.Tx) error {
					var err error
					out, err = c.fn(ctx, tx)
					return err
				})
				return fmt.Sprintf("%s | Do = %v", out, err)
			}
			if alone, ridden := run(false), run(true); alone != ridden {
				t.Fatalf("with the option: %s\nwithout: %s", ridden, alone)
			}
		})
	}
}

func dsnSep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}
