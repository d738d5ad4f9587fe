package guard_test

// txproof_test.go: Do never returns nil for an attempt whose statements left
// the transaction that claimed, whatever the statement's text looked like
// and whichever way its error reached fn (issue 22, items 1 and 2). The
// statements here are ones Tx's text checks read as plain, or check only
// after they ran: the server's proof (session.go) must catch them all.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// endForm is a statement that ends the transaction it runs in, in a form
// fn might send without knowing it does.
type endForm struct {
	name  string
	query string
	// commits: the form commits the claiming transaction (what fn wrote
	// before it applies, and Do must say so with ErrImplicitCommit);
	// otherwise it rolls it back (nothing applies).
	commits bool
	// multi: the text holds several statements; it runs on a pool whose
	// DSN has multiStatements=true.
	multi bool
	setup []string // run once on the test's database before Do
}

// unseenEnds are the forms of TestUnseenEndOfTransactionIsNeverNil.
var unseenEnds = []endForm{
	{name: "set-statement-commit", query: "SET STATEMENT max_statement_time=10 FOR COMMIT", commits: true},
	{name: "set-statement-rollback", query: "SET STATEMENT max_statement_time=10 FOR ROLLBACK"},
	{name: "executable-comment", query: "/*!100000 COMMIT */", commits: true},
	{name: "mariadb-executable-comment", query: "/*M!100000 COMMIT */", commits: true},
	// Refused by Tx before it is sent, so nothing commits; Do still must
	// not return nil.
	{name: "set-session-autocommit", query: "SET @@session.autocommit = 1"},
	{name: "set-statement-ddl", query: "SET STATEMENT sql_mode='' FOR CREATE TABLE made_in_fn (id INT)", commits: true},
	{name: "execute-immediate", query: "EXECUTE IMMEDIATE 'COMMIT'", commits: true},
	{name: "multi-statement", query: "DO 0; COMMIT", commits: true, multi: true},
	// Forms of our own finding.
	{name: "multi-statement-ddl", query: "SELECT 1; CREATE TABLE made_in_fn_multi (id INT)", commits: true, multi: true},
	{name: "multi-statement-rollback", query: "DO 0; ROLLBACK", multi: true},
	{name: "set-statement-start-transaction", query: "SET STATEMENT max_statement_time=10 FOR START TRANSACTION", commits: true},
	{name: "set-statement-analyze", query: "SET STATEMENT max_statement_time=10 FOR ANALYZE TABLE counters", commits: true},
	{name: "set-statement-truncate", query: "SET STATEMENT max_statement_time=10 FOR TRUNCATE TABLE scratch", commits: true,
		setup: []string{"CREATE TABLE scratch (id INT)"}},
	{name: "set-statement-call", query: "SET STATEMENT max_statement_time=10 FOR CALL commit_quietly()", commits: true,
		setup: []string{"CREATE PROCEDURE commit_quietly() COMMIT"}},
	{name: "set-statement-execute-immediate", query: "SET STATEMENT max_statement_time=10 FOR EXECUTE IMMEDIATE 'COMMIT'", commits: true},
	// MariaDB commits before CREATE TEMPORARY SEQUENCE, unlike CREATE
	// TEMPORARY TABLE.
	{name: "create-temporary-sequence", query: "CREATE TEMPORARY SEQUENCE seq_in_fn", commits: true},
	// "--" followed by a carriage return starts a comment to the end of the
	// line for the server; a reader that knows only "-- " sees punctuation.
	{name: "dash-dash-cr-comment-commit", query: "--\r\nCOMMIT", commits: true},
	{name: "dash-dash-cr-comment-ddl", query: "--\r\nCREATE TABLE made_in_fn_cr (id INT)", commits: true},
	{name: "dash-dash-cr-comment-rollback", query: "--\r\nROLLBACK"},
	{name: "set-statement-drop-missing", query: "SET STATEMENT max_statement_time=10 FOR DROP TABLE IF EXISTS no_such_table", commits: true},
}

// statementVias are the Tx methods a form is sent through.
var statementVias = []string{"exec", "query", "queryrow", "get"}

// A careless fn: it increments counter 1, sends a statement that ends the
// transaction (ignoring its error), then adds 1000 to counter 2 (ignoring
// that error too) and returns nil. Do must not return nil; nothing fn wrote
// after the end may apply; what it wrote before applies at most once, and
// then Do says so (ErrImplicitCommit) and never runs fn again.
func TestUnseenEndOfTransactionIsNeverNil(t *testing.T) {
	for _, f := range unseenEnds {
		for _, via := range statementVias {
			t.Run(f.name+"/"+via, func(t *testing.T) { testUnseenEnd(t, f, via) })
		}
	}
}

// A statement fn sends that turns autocommit back on, unseen (its text
// hides it from Tx's checks, or the server runs it from dynamic SQL):
// switching autocommit on commits the claiming transaction, and from then on
// every statement of fn commits on its own. No session setting can be
// locked against fn, so those statements cannot be stopped; what Do
// guarantees is the verdict: never nil, never run again, and an error that
// says that fn's later statements may have committed outside the fence.
func TestUnseenAutocommitOnIsNeverNil(t *testing.T) {
	for _, f := range []endForm{
		{name: "dash-dash-cr-comment", query: "--\r\nSET autocommit = 1"},
		{name: "set-statement-execute-immediate", query: "SET STATEMENT max_statement_time=10 FOR EXECUTE IMMEDIATE CONCAT('SET auto', 'commit = 1')"},
		{name: "multi-statement", query: "DO 0; SET @@session.autocommit = 1", multi: true},
	} {
		for _, via := range []string{"exec", "query"} {
			for _, rolledBack := range []bool{false, true} {
				name := f.name + "/" + via
				if rolledBack {
					name += "/after-a-rollback"
				}
				t.Run(name, func(t *testing.T) { testUnseenAutocommitOn(t, f, via, rolledBack) })
			}
		}
	}
}

// testUnseenAutocommitOn runs f's statement in fn after an increment. With
// rolledBack, the server has first rolled the claiming transaction back
// without fn noticing (a deadlock reported only through rows.Err, stood for
// by a ROLLBACK sent past Tx with completion_type set back, which leaves
// the session open as the server's rollback does).
func testUnseenAutocommitOn(t *testing.T, f endForm, via string, rolledBack bool) {
	e, ctx := fencedEnv(t, envConfig{}, "unseen", f.setup...)
	g := e.g
	if f.multi {
		g = guard.New(e.locker, multiStatementDB(t, e.dsn), nil)
		must(t, g.Do(ctx, "unseen", func(ctx context.Context, tx *guard.Tx) error { return nil })) // that guard's fence row
	}
	attempts := 0
	err := g.Do(ctx, "unseen", func(ctx context.Context, tx *guard.Tx) error {
		attempts++
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		if rolledBack {
			_, _ = tx.Tx.ExecContext(ctx, "SET completion_type = 'NO_CHAIN'")
			_, _ = tx.Tx.ExecContext(ctx, "ROLLBACK")
		}
		_ = sendVia(ctx, tx, via, f.query)
		_, _ = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2")
		return nil
	})
	n1, n2 := e.counter(1), e.counter(2)
	t.Logf("Do: %v after %d attempts; counters %d and %d", err, attempts, n1, n2)
	if err == nil {
		t.Fatalf("Do returned nil, though fn's statement %q ended the transaction that claimed", f.query)
	}
	if attempts != 1 {
		t.Errorf("fn ran %d times, want once: what it ran after autocommit went on may have committed", attempts)
	}
	want := guard.ErrImplicitCommit // the claiming transaction committed
	if rolledBack {
		want = guard.ErrOutcomeUnknown // it did not, but what fn ran after may have
	}
	if !errors.Is(err, want) || !strings.Contains(err.Error(), "autocommit on") {
		t.Errorf("Do: %v, want %v saying that fn switched autocommit on", err, want)
	}
	if fence.Retryable(err) || fence.IsConnectionLost(err) {
		t.Errorf("Do: %v looks retryable to a caller", err)
	}
	if wantN1 := map[bool]int{false: 1, true: 0}[rolledBack]; n1 != wantN1 {
		t.Errorf("counter 1 = %d, want %d", n1, wantN1)
	}
	// The pool and the key are fit for the next caller: a plain Do commits.
	must(t, g.Do(ctx, "unseen", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	if got := e.counter(1); got != n1+1 {
		t.Fatalf("counter 1 = %d after a clean Do, want %d", got, n1+1)
	}
}

func testUnseenEnd(t *testing.T, f endForm, via string) {
	e, ctx := fencedEnv(t, envConfig{}, "unseen", f.setup...)
	g := e.g
	if f.multi {
		g = guard.New(e.locker, multiStatementDB(t, e.dsn), nil)
		must(t, g.Do(ctx, "unseen", func(ctx context.Context, tx *guard.Tx) error { return nil })) // that guard's fence row
	}
	attempts := 0
	var formErr error
	err := g.Do(ctx, "unseen", func(ctx context.Context, tx *guard.Tx) error {
		attempts++
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		formErr = sendVia(ctx, tx, via, f.query)
		_, _ = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2")
		return nil
	})
	n1, n2 := e.counter(1), e.counter(2)
	t.Logf("Do: %v after %d attempts (the statement: %v); counters %d and %d", err, attempts, formErr, n1, n2)
	if err == nil {
		t.Fatalf("Do returned nil, though fn's statement %q ended the transaction that claimed", f.query)
	}
	if n2 != 0 {
		t.Errorf("counter 2 = %d, want 0: fn's write after the end of the transaction applied", n2)
	}
	if n1 > 1 {
		t.Errorf("counter 1 = %d, want at most 1: work applied twice", n1)
	}
	if f.commits && (n1 != 1 || !errors.Is(err, guard.ErrImplicitCommit)) {
		t.Errorf("Do: %v, counter 1 = %d; want ErrImplicitCommit and 1: the statement committed the work before it", err, n1)
	}
	if !f.commits && n1 != 0 {
		t.Errorf("counter 1 = %d, want 0: the statement rolled the work back", n1)
	}
	if n1 == 1 || f.commits && errors.Is(err, guard.ErrImplicitCommit) {
		if attempts != 1 {
			t.Errorf("fn ran %d times, want once: the first attempt committed", attempts)
		}
	}
	if n1 == 1 && !errors.Is(err, guard.ErrImplicitCommit) {
		t.Errorf("Do: %v, want ErrImplicitCommit: the work before the statement committed", err)
	}
	if errors.Is(err, guard.ErrImplicitCommit) && (fence.Retryable(err) || fence.IsConnectionLost(err)) {
		t.Errorf("Do: %v looks retryable to a caller, though the attempt committed", err)
	}
	// The pool and the key are fit for the next caller: a plain Do commits.
	must(t, g.Do(ctx, "unseen", func(ctx context.Context, tx *guard.Tx) error { return increment(ctx, tx, 1) }))
	if got := e.counter(1); got != n1+1 {
		t.Errorf("counter 1 = %d after a clean Do, want %d", got, n1+1)
	}
	if got := e.counter(2); got != 0 {
		t.Errorf("counter 2 = %d after a clean Do, want 0", got)
	}
}

// sendVia sends query through one of Tx's own statement methods and returns
// the error fn would see (and ignore).
func sendVia(ctx context.Context, tx *guard.Tx, via, query string) error {
	switch via {
	case "exec":
		_, err := tx.ExecContext(ctx, query)
		return err
	case "query":
		rows, err := tx.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			return err
		}
		return rows.Err()
	case "queryrow":
		var x any
		return tx.QueryRowContext(ctx, query).Scan(&x)
	case "get":
		var x int
		return tx.GetContext(ctx, &x, query)
	}
	panic("unknown via " + via)
}

// multiStatementDB opens a pool on dsn with multiStatements=true.
func multiStatementDB(t *testing.T, dsn string) *sqlx.DB {
	t.Helper()
	mc, err := mysql.ParseDSN(dsn)
	must(t, err)
	mc.MultiStatements = true
	db, err := sqlx.Open("mysql", mc.FormatDSN())
	must(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// itemRows is the size of the items table: a locking read over all of it
// streams well over the server's network buffer (16 KiB) of rows before it
// reaches midRow.
const (
	itemRows  = 2000
	midRow    = 1500
	rangeRead = "SELECT id, pad FROM items WHERE id BETWEEN 1 AND 2000 FOR UPDATE"
)

// rangeEnv returns a fenced env with the table items.
func rangeEnv(t *testing.T, cfg envConfig, key string) (*env, context.Context) {
	t.Helper()
	e, ctx := fencedEnv(t, cfg, key)
	testenv.MustExec(t, e.db, "CREATE TABLE items (id INT PRIMARY KEY, v INT NOT NULL, pad CHAR(200) NOT NULL) ENGINE=InnoDB")
	testenv.MustExec(t, e.db, fmt.Sprintf("SET STATEMENT max_recursive_iterations = 100000 FOR INSERT INTO items (id, v, pad) WITH RECURSIVE s(i) AS"+
		" (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i, 0, REPEAT('x', 200) FROM s", itemRows))
	return e, ctx
}

// lockMidRange makes fn's next locking read over items the victim of a
// deadlock after rows have streamed. Called in fn after fn's transaction
// has locked counter row 1: a plain transaction updates every item from
// midRow on (so it weighs more than fn's: InnoDB rolls back the lighter
// one), then waits for counter row 1. fn's read locks and sends the rows
// before midRow, then waits for midRow and closes the cycle. The plain
// transaction adds 10 to counter 1 and commits once fn's is gone; its
// result comes on the returned channel.
func lockMidRange(t *testing.T, e *env) <-chan error {
	t.Helper()
	ctx := context.Background()
	ptx, err := e.db.BeginTxx(ctx, nil)
	must(t, err)
	t.Cleanup(func() { _ = ptx.Rollback() })
	_, err = ptx.ExecContext(ctx, "UPDATE items SET v = v + 1 WHERE id >= ?", midRow)
	must(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := ptx.ExecContext(ctx, "UPDATE counters SET n = n + 10 WHERE id = 1")
		if err == nil {
			err = ptx.Commit()
		}
		done <- err
	}()
	waitFor(t, "the plain transaction to wait for fn's row", func() bool {
		return e.running("UPDATE counters SET n = n + 10 WHERE id = 1") == 1
	})
	return done
}

// A locking range read that meets a deadlock after rows started streaming
// reports it only through rows.Next/rows.Err (or, through QueryRow, Scan):
// InnoDB has rolled fn's transaction back, claim included. Three fns:
//   - drop: drops rows.Err() and goes on writing, then returns nil;
//   - return: returns rows.Err();
//   - queryrow: a QueryRow over the range read, whose Scan error it drops
//     before writing on.
//
// The attempt that met the deadlock applies nothing, its later write above
// all, and Do never reports it committed: with one attempt allowed Do
// fails; otherwise Do runs fn again and the second attempt's work applies,
// once.
func TestDeadlockAfterRowsStreamed(t *testing.T) {
	for _, h := range []guard.HandOff{guard.HandOffAuto, guard.HandOffAtEnd} {
		for _, fnKind := range []string{"drop", "return", "queryrow"} {
			for _, maxAttempts := range []int{1, 0} {
				t.Run(fmt.Sprintf("%s/%s/MaxAttempts=%d", h, fnKind, maxAttempts), func(t *testing.T) {
					testDeadlockAfterRowsStreamed(t, h, fnKind, maxAttempts)
				})
			}
		}
	}
}

func testDeadlockAfterRowsStreamed(t *testing.T, h guard.HandOff, fnKind string, maxAttempts int) {
	e, ctx := rangeEnv(t, envConfig{guard: &guard.Options{HandOff: h, MaxAttempts: maxAttempts}}, "range")
	var plainDone <-chan error
	var streamed int
	var readErr, headerErr error
	attempts := 0
	err := e.g.Do(ctx, "range", func(ctx context.Context, tx *guard.Tx) error {
		attempts++
		if err := increment(ctx, tx, 1); err != nil {
			return err
		}
		first := tx.Attempt() == 1
		if first {
			plainDone = lockMidRange(t, e)
		}
		var err error
		if fnKind == "queryrow" {
			var id int
			var pad string
			err = tx.QueryRowContext(ctx, rangeRead).Scan(&id, &pad)
			if first {
				readErr = err
				if id == 1 {
					streamed = 1
				}
			}
		} else {
			rows, qerr := tx.QueryContext(ctx, rangeRead)
			if first {
				headerErr = qerr
			}
			if qerr != nil {
				return qerr
			}
			n := 0
			for rows.Next() {
				n++
			}
			_ = rows.Close()
			err = rows.Err()
			if first {
				streamed, readErr = n, err
			}
		}
		if fnKind == "return" && err != nil {
			return err
		}
		_, _ = tx.ExecContext(ctx, "UPDATE counters SET n = n + 1000 WHERE id = 2") // a careless fn goes on
		return nil
	})
	if plainDone == nil {
		t.Fatalf("Do: %v before fn set up the deadlock", err)
	}
	must(t, <-plainDone)
	if headerErr != nil {
		t.Fatalf("QueryContext: %v, want the rows' header, then the deadlock through rows.Err", headerErr)
	}
	if mysqlErrno(readErr) != 1213 || streamed == 0 {
		t.Fatalf("the range read: %v after %d rows, want a deadlock (1213) after rows streamed", readErr, streamed)
	}
	n1, n2 := e.counter(1), e.counter(2)
	t.Logf("Do: %v after %d attempts; %d rows before the deadlock; counters %d and %d", err, attempts, streamed, n1, n2)
	if maxAttempts == 1 {
		if err == nil {
			t.Fatal("Do returned nil for the attempt the deadlock rolled back")
		}
		if errors.Is(err, guard.ErrImplicitCommit) || errors.Is(err, guard.ErrOutcomeUnknown) {
			t.Errorf("Do: %v, want it to say nothing applied", err)
		}
		if n1 != 10 || n2 != 0 {
			t.Fatalf("counters %d and %d, want 10 and 0 (only the plain transaction's write): the attempt's writes applied", n1, n2)
		}
		return
	}
	if err != nil || attempts != 2 {
		t.Fatalf("Do: %v after %d attempts, want nil after 2: the deadlock rolled the first back", err, attempts)
	}
	if n1 != 11 || n2 != 1000 {
		t.Fatalf("counters %d and %d, want 11 and 1000: the attempts' work applied once", n1, n2)
	}
}
