package chaos

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/internal/testenv"
)

// Scenario "unseen-end": careless fns under load, on Guards with the
// defaults (the lock handed on at the claim, transactions relayed), while
// the lock's Redis keys are deleted under their holders every few hundred
// milliseconds. Each buy's fn does one of (chosen from its operation id,
// the same on every attempt):
//   - a clean buy;
//   - a buy, then a statement that ends the transaction in a form Tx does
//     not read as one (or checks only after it ran; a multi-statement text
//     on a pool with multiStatements=true), whose error it ignores, then a
//     stray write that would take 1000 units;
//   - the same statement after reading the stock, before the buy's writes;
//   - a locking range read over a side table that a plain transaction
//     makes deadlock after rows have streamed (the plain one holds the end
//     of the range and waits for the fence row): fn drops rows.Err() (or
//     a QueryRow's Scan error) and writes on, or returns rows.Err().
//
// Histories must be linearizable, nothing oversold, an order present
// exactly for the buys Do reported committed (or whose outcome it could not
// know), none of the stray writes applied, and no buy whose fn ended its
// transaction reported committed.
func TestScenarioUnseenEnd(t *testing.T) {
	e := newEnv(t, "unseen-end", 100_000)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 90*time.Second)
	for _, q := range []string{
		"CREATE PROCEDURE chaos_commit() COMMIT",
		"CREATE TABLE scan_rows (id INT PRIMARY KEY, v INT NOT NULL, pad CHAR(200) NOT NULL) ENGINE=InnoDB",
		"SET STATEMENT max_recursive_iterations = 100000 FOR INSERT INTO scan_rows (id, v, pad) WITH RECURSIVE s(i) AS" +
			" (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2000) SELECT i, 0, REPEAT('x', 200) FROM s",
	} {
		_, err := e.db.ExecContext(ctx, q)
		mustNoErr(t, err, q)
	}
	params := map[string]string{"innodb_lock_wait_timeout": "3"}
	plain := e.open(e.dsnVia("", params))
	multi := e.open(multiStatementsDSN(t, e.dsnVia("", params)))
	cs := []*client{
		e.newClient(srv.Client(), plain, fastLocks),
		e.newClient(srv.Client(), plain, fastLocks),
		e.newClient(srv.Client(), multi, fastLocks),
	}
	cs = append(cs, cs[0].sibling(), cs[2].sibling())
	multiClient := map[int]bool{cs[2].id: true, cs[4].id: true}

	var st unseenStats
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { st.load(lctx, e, c, multiClient[c.id]) })
	}
	defer func() { stop(); wg.Wait() }()
	// After the first buy, the fence row exists for the plain transaction
	// to wait on.
	_, err := e.awaitProgress(ctx, 0, 15*time.Second)
	mustNoErr(t, err, "first buy")
	f, err := lookupFence(ctx, e.db, e.item)
	mustNoErr(t, err, "fence row")
	ddb := e.open(e.dsnVia("", map[string]string{"innodb_lock_wait_timeout": "2"}))
	ddb.SetMaxOpenConns(1)
	wg.Go(func() { st.deadlocker(lctx, ddb, f.Resource) })
	wg.Go(func() {
		r := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
		for lctx.Err() == nil {
			select {
			case <-lctx.Done():
				return
			case <-time.After(time.Duration(150+r.IntN(200)) * time.Millisecond):
			}
			if e.dropGrant(lctx, srv.Client()) == nil {
				st.drops.Add(1)
			}
		}
	})
	time.Sleep(8 * time.Second)
	stop()
	wg.Wait()
	// A statement that committed the claim before the buy wrote anything
	// leaves the fence row naming a claim without an order; the checks
	// require the row to name the last order, so a clean buy comes last.
	if op := cs[0].buy(ctx, 1, 8*time.Second, nil); op.Outcome != Accepted {
		t.Fatalf("the last, clean buy: %s (%s)", op.Outcome, op.Err)
	}

	s := e.finish()
	t.Logf("%d buys ended their transaction (%d forms sent); %d range reads met a deadlock after rows streamed; %d grants dropped; "+
		"%d orders, %d unknown, %d failed", st.enders(), st.forms.Load(), st.deadlocks.Load(), st.drops.Load(), s.Orders, s.Unknown, s.Failed)
	for _, op := range e.h.Ops() {
		if op.Kind == Buy && op.Outcome == Accepted && st.ended(op.ID) {
			t.Errorf("buy %s (token %d) reported committed, though its fn ended the transaction", op.ID, op.Token)
		}
	}
	if st.forms.Load() == 0 || st.deadlocks.Load() == 0 || st.drops.Load() == 0 {
		t.Errorf("%d forms sent, %d deadlocks after rows streamed, %d grants dropped: the scenario did not exercise every fault",
			st.forms.Load(), st.deadlocks.Load(), st.drops.Load())
	}
}

// unseenForms end the transaction they run in, and Tx's text checks read
// them as plain statements or check them only after they ran. Statements
// that turn autocommit back on are left out: see guard's
// TestUnseenAutocommitOnIsNeverNil.
var unseenForms = []string{
	"SET STATEMENT max_statement_time=10 FOR COMMIT",
	"SET STATEMENT max_statement_time=10 FOR ROLLBACK",
	"SET STATEMENT sql_mode='' FOR CREATE TABLE IF NOT EXISTS made_in_fn (id INT)",
	"SET STATEMENT max_statement_time=10 FOR CALL chaos_commit()",
	"CREATE OR REPLACE TEMPORARY SEQUENCE seq_in_fn",
	"--\r\nCOMMIT",
	"--\r\nROLLBACK",
	"/*!100000 COMMIT */",
	"EXECUTE IMMEDIATE 'COMMIT'",
}

// multiForms are unseenForms for a pool with multiStatements=true.
var multiForms = []string{
	"DO 0; COMMIT",
	"DO 0; ROLLBACK",
	"SELECT 1; CREATE OR REPLACE TEMPORARY SEQUENCE seq_in_fn",
}

// Kinds of fn, chosen by [fnKind].
const (
	fnClean = iota
	fnEndAfter
	fnEndBefore
	fnRangeDrop
	fnRangeRow
	fnRangeReturn
	fnKinds
)

// fnKind chooses a buy's kind of fn from its operation id, the same on
// every attempt, so that a buy whose fn ends its transaction does so on each.
func fnKind(opID string) (kind int, pick int) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(opID))
	v := int(h.Sum32())
	// Half the buys are clean, so that the history has enough definite
	// outcomes to check.
	if v%2 == 0 {
		return fnClean, v / 2
	}
	return 1 + (v/2)%(fnKinds-1), v / (2 * fnKinds)
}

// unseenStats counts what the scenario's fns did.
type unseenStats struct {
	forms     atomic.Int64 // statements that end the transaction, sent
	deadlocks atomic.Int64 // range reads that met a deadlock after streaming rows
	drops     atomic.Int64 // grants dropped
	endedOps  sync.Map     // op ids whose fn ended its transaction (on every attempt)
}

func (s *unseenStats) ended(opID string) bool { _, ok := s.endedOps.Load(opID); return ok }

func (s *unseenStats) enders() int {
	n := 0
	s.endedOps.Range(func(any, any) bool { n++; return true })
	return n
}

// load runs c's buyers, each buy's fn of the kind fnKind picks, until ctx
// ends; multi says c's pool runs multi-statement texts.
func (s *unseenStats) load(ctx context.Context, e *env, c *client, multi bool) {
	for ctx.Err() == nil {
		p := e.h.Invoke(c.id, Buy, 1)
		bctx, cancel := context.WithTimeout(ctx, 8*time.Second)
		var token uint64
		err := c.g.Do(bctx, e.item, func(ctx context.Context, tx *guard.Tx) error {
			token = tx.Token()
			return s.fn(ctx, tx, e.item, p.ID(), multi)
		})
		cancel()
		p.Return(Classify(err), 0, token, err)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fn is one buy of a unit, of the kind fnKind picks for opID.
func (s *unseenStats) fn(ctx context.Context, tx *guard.Tx, item, opID string, multi bool) error {
	kind, pick := fnKind(opID)
	form := unseenForms[pick%len(unseenForms)]
	if multi {
		form = multiForms[pick%len(multiForms)]
	}
	end := func(ctx context.Context) error {
		s.endedOps.Store(opID, true)
		s.forms.Add(1)
		_, _ = tx.ExecContext(ctx, form) // a careless fn
		return nil
	}
	switch kind {
	case fnEndAfter:
		if err := buyIn(ctx, tx, item, opID, 1, tx.Token(), tx.OpID(), nil); err != nil {
			return err
		}
		_ = end(ctx)
		_, _ = tx.ExecContext(ctx, "UPDATE items SET stock = stock - 1000 WHERE id = ?", item)
		return nil
	case fnEndBefore:
		return buyIn(ctx, tx, item, opID, 1, tx.Token(), tx.OpID(), end)
	case fnRangeDrop, fnRangeRow, fnRangeReturn:
		return buyIn(ctx, tx, item, opID, 1, tx.Token(), tx.OpID(), func(ctx context.Context) error {
			err := s.rangeRead(ctx, tx, kind == fnRangeRow)
			if kind == fnRangeReturn {
				return err
			}
			return nil // dropped: the buy writes on
		})
	}
	return buyIn(ctx, tx, item, opID, 1, tx.Token(), tx.OpID(), nil)
}

// rangeRead runs a locking read over scan_rows, through Query (reading
// every row) or QueryRow, and returns the error that reached fn only
// through rows.Err or Scan.
func (s *unseenStats) rangeRead(ctx context.Context, tx *guard.Tx, row bool) error {
	const q = "SELECT id, pad FROM scan_rows WHERE id BETWEEN 1 AND 2000 FOR UPDATE"
	var id, n int
	var pad string
	var err error
	if row {
		err = tx.QueryRowContext(ctx, q).Scan(&id, &pad)
		if err == nil || id != 0 {
			n = 1
		}
	} else {
		rows, qerr := tx.QueryContext(ctx, q)
		if qerr != nil {
			return qerr
		}
		for rows.Next() {
			n++
		}
		_ = rows.Close()
		err = rows.Err()
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1213 && n > 0 {
		s.deadlocks.Add(1)
	}
	return err
}

// deadlocker loops a plain transaction that updates the end of scan_rows
// (weighing more than a buy's transaction, so that InnoDB picks the buy's
// as a deadlock's victim) and then waits for the fence row resource, held
// by the running buy: a buy whose range read reaches those rows closes the
// cycle after streaming the rows before them.
func (s *unseenStats) deadlocker(ctx context.Context, db *sqlx.DB, resource string) {
	r := rand.New(rand.NewPCG(13, uint64(time.Now().UnixNano())))
	for ctx.Err() == nil {
		_ = lockThenWait(ctx, db, resource)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20+r.IntN(60)) * time.Millisecond):
		}
	}
}

// lockThenWait is one round of deadlocker; its transaction is rolled back.
func lockThenWait(ctx context.Context, db *sqlx.DB, resource string) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "UPDATE scan_rows SET v = v + 1 WHERE id >= 1500"); err != nil {
		return err
	}
	var x int
	return tx.GetContext(ctx, &x, "SELECT 1 FROM "+fence.Table+" WHERE resource = ? FOR UPDATE", resource)
}

// multiStatementsDSN returns dsn with multiStatements=true.
func multiStatementsDSN(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	mustNoErr(t, err, "parse DSN")
	cfg.MultiStatements = true
	return cfg.FormatDSN()
}
