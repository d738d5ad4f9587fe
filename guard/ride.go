package guard

// ride.go owns the claim that rides with fn's first statement: one request
// carries the claim and, once the claim holds the fence row, that
// statement, so that a Do pays no round trip for the claim. It decides
// which statements may carry the claim and renders them; whether the claim
// holds is decided in claim.go, what a failure means in attempt.go.
//
// The request is one compound statement, which the server runs with the
// session's own SQL mode and character sets:
//
//	BEGIN NOT ATOMIC
//	  CALL redfence_begin_claim(mark, claim);
//	  IF LAST_INSERT_ID() = 1 THEN EXECUTE IMMEDIATE X'<statement>' USING <arguments>; … END IF;
//	END
//
// Safety rests on what cannot happen, not on reading fn's SQL:
//   - fn's statement runs as a prepared statement (EXECUTE IMMEDIATE), which
//     holds one statement or is refused: no text can make it two; its
//     arguments are bound to its placeholders by the server, never written
//     into its text, so no argument can become SQL;
//   - it runs only after the claim accepted the token, in the same
//     transaction;
//   - nothing else of fn reaches the transaction before the claim holds:
//     every other method of Tx sends the claim first (on its own, in the
//     same compound statement), and the *sqlx.Tx that Tx embeds is, until
//     then, a transaction of the pool that was rolled back (Guard.closedTx),
//     whose statements fail with sql.ErrTxDone. A statement sent there
//     cannot read a snapshot older than the last holder's COMMIT, nor
//     commit a write before the claim.
//
// Which statements ride is a matter of fidelity, not of safety: an UPDATE
// or DELETE sent by Exec (whose affected rows and insert id the compound
// statement reports exactly: ROW_COUNT(), and LAST_INSERT_ID() from 0), or a
// SELECT sent by Query, Queryx, Get or Select, whose '?' are all
// placeholders and whose arguments have literals that bind as the driver
// binds them. Anything else sends the claim on its own first.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/jmoiron/sqlx/reflectx"

	"github.com/redfence/redfence/fence"
)

// rideStmt is a statement of fn that carries the claim: its text, its
// arguments as literals, which the server binds to its placeholders
// (EXECUTE IMMEDIATE … USING), and whether it was sent by Exec. A claim that
// was to ride and goes on its own is sent in the same compound statement
// carrying an empty rideStmt.
type rideStmt struct {
	query string
	using []string
	exec  bool
}

// maxRide bounds the text of a statement that carries the claim with its
// arguments (it goes in hexadecimal, twice as long); a longer one is sent
// as it is, after the claim.
const maxRide = 16 << 10

// newRide returns query with its arguments, when it may carry the claim, or
// nil. The arguments are bound by the server, never written into query's
// text, so what newRide reads of query (its verb, its placeholders, their
// neighbours) decides only whether the result is the one query gives sent
// on its own: a misreading cannot make an argument into SQL.
func newRide(query string, args []any, exec bool) *rideStmt {
	words, ok := leadingWords(query, 1)
	if !ok || len(words) == 0 || len(query) > maxRide {
		return nil
	}
	switch verb := words[0]; {
	case strings.Contains(strings.ToUpper(query), "RETURNING"):
		return nil // its rows would come before the row count
	case exec && (verb == "UPDATE" || verb == "DELETE"):
	case !exec && verb == "SELECT":
	default:
		return nil
	}
	if n, ok := placeholders(query); !ok || n != len(args) {
		return nil
	}
	r := &rideStmt{query: query, exec: exec, using: make([]string, 0, len(args))}
	size, at := len(query), 0
	for _, a := range args {
		lit, ok := literal(a)
		i := at + strings.IndexByte(query[at:], '?')
		if size += len(lit) + 2; !ok || !apart(query, i) || size > maxRide {
			return nil
		}
		r.using = append(r.using, lit)
		at = i + 1
	}
	return r
}

// placeholders counts the '?' of query, and reports whether every one is a
// placeholder: none inside a quoted string or identifier or a comment, and
// nothing in the text that SQL modes read differently (a backslash in a
// quoted string) or that runs what it hides (an executable comment). The
// server counts them itself (and refuses a mismatch, after the claim);
// this keeps such a query to the error database/sql gives before sending.
func placeholders(q string) (n int, ok bool) {
	for i := 0; i < len(q); i++ {
		end := ""
		switch c := q[i]; {
		case c == '?':
			n++
			continue
		case c == '\'', c == '"', c == '`':
			j := i + 1
			for ; j < len(q) && (q[j] != c || j+1 < len(q) && q[j+1] == c); j++ {
				if q[j] == c { // a doubled quote
					j++
				} else if q[j] == '\\' && c != '`' {
					return 0, false
				}
			}
			if j >= len(q) || strings.IndexByte(q[i:j], '?') >= 0 {
				return 0, false
			}
			i = j
			continue
		case c == '#', c == '-' && strings.HasPrefix(q[i:], "--"):
			// Any "--" counts: the server's rule (a space or control
			// character after it) is narrower, and a '?' seen as commented
			// out only keeps the statement from riding.
			end = "\n"
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			if strings.HasPrefix(q[i:], "/*!") || strings.HasPrefix(q[i:], "/*M!") {
				return 0, false
			}
			end = "*/"
		default:
			continue
		}
		from := i + len(end) // "/*/" does not end the comment it opens
		if end == "\n" {
			from = i + 1
		}
		j := strings.Index(q[from:], end)
		if j < 0 {
			if end == "*/" {
				return 0, false
			}
			j = len(q) - from
		}
		if strings.IndexByte(q[i:from+j], '?') >= 0 {
			return 0, false
		}
		i = from + j
	}
	return n, true
}

// apart reports whether the '?' at q[i] stands apart from the tokens
// around it ("?e1" does not), as in the statements that ride: what else
// the server makes of such a text is left to the text sent on its own.
func apart(q string, i int) bool {
	const sep = " \t\r\n\f\v(),=<>!+-*/%|&^~;:"
	return (i == 0 || strings.IndexByte(sep, q[i-1]) >= 0) &&
		(i+1 == len(q) || strings.IndexByte(sep, q[i+1]) >= 0)
}

// literal renders v as an SQL literal, bound to a placeholder by EXECUTE
// IMMEDIATE … USING, that means what v bound by the driver means, whatever
// the session's SQL mode: integers from 0 to 1<<63-1,
// doubles, NULL, and strings with neither a backslash nor a NUL byte
// (quotes doubled, which reads the same with and without
// NO_BACKSLASH_ESCAPES). ok is false for anything else (negative integers,
// unsigned ones, which the driver binds as BIGINT UNSIGNED, []byte,
// time.Time, NaN, ...),
// which then goes as an argument, after the claim.
func literal(v any) (lit string, ok bool) {
	if vr, isValuer := v.(driver.Valuer); isValuer {
		// As database/sql: a nil pointer whose element type is a Valuer is
		// NULL; any other Valuer gives its Value, which must be a
		// driver.Value.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() && rv.Type().Elem().Implements(valuerType) {
			return "NULL", true
		}
		x, err := vr.Value()
		if err != nil || !driver.IsValue(x) {
			return "", false
		}
		v = x
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Invalid:
		return "NULL", true
	case reflect.Pointer:
		if rv.IsNil() {
			return "NULL", true
		}
		return literal(rv.Elem().Interface())
	case reflect.Bool:
		if rv.Bool() {
			return "1", true
		}
		return "0", true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v := rv.Int(); v >= 0 {
			return strconv.FormatInt(v, 10), true
		}
		return "", false // LIMIT reads a bound negative value as unsigned, a literal not
	case reflect.Float64:
		f := rv.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "", false
		}
		return strconv.FormatFloat(f, 'e', -1, 64), true // an exponent makes it a DOUBLE, as the bound value
	case reflect.String:
		s := rv.String()
		if strings.ContainsAny(s, "\\\x00") {
			return "", false
		}
		return "'" + strings.ReplaceAll(s, "'", "''") + "'", true
	}
	return "", false
}

// rideBlock is the compound statement that sends claim, with the session
// marked by mark, and r once claim accepted the token.
func rideBlock(mark, claim string, r *rideStmt) string {
	var b strings.Builder
	b.WriteString("BEGIN NOT ATOMIC ")
	b.WriteString(fmt.Sprintf(sqlBeginClaim, mark, hex.EncodeToString([]byte(claim))))
	if r.query == "" {
		b.WriteString("; END")
		return b.String()
	}
	accepted := strconv.Itoa(fence.ClaimAccepted)
	b.WriteString("; IF LAST_INSERT_ID() = " + accepted + " THEN ")
	if r.exec {
		b.WriteString("DO LAST_INSERT_ID(0); ")
	}
	b.WriteString("EXECUTE IMMEDIATE X'" + hex.EncodeToString([]byte(r.query)) + "'")
	if len(r.using) > 0 {
		b.WriteString(" USING " + strings.Join(r.using, ", "))
	}
	b.WriteString("; ")
	if r.exec {
		// The session's LAST_INSERT_ID() stays the claim's, as after the
		// statement sent on its own, unless the statement set one.
		b.WriteString("SELECT ROW_COUNT(), LAST_INSERT_ID(); IF LAST_INSERT_ID() = 0 THEN DO LAST_INSERT_ID(" + accepted + "); END IF; ")
	}
	b.WriteString("END IF; END")
	return b.String()
}

// rides reports whether the claim of h's attempt may ride with fn's first
// statement: enabled (ridesOn), a Redis token (database mode mints it in
// the claim), the closed transaction fn's embedded *sqlx.Tx stands for
// until then (made by the pool check), and a key whose fence row was seen
// (a missing one is made before the claim, which must then be its own
// statement).
func (g *Guard) rides(h holding) bool {
	return g.ridesOn() && g.carries(h)
}

// carries reports whether the claim of h's attempt may carry a statement:
// a Redis token (database mode mints it in the claim), a pool whose
// sessions obey a SELECT in a compound statement (Guard.closedTx, made by
// the pool check), a key whose fence row was seen (a missing one is made
// before the claim, which must then be its own statement), and a server
// whose peers take no writes (on Galera the statement would be prepared on
// the server, where a brute-force abort may go unreported).
func (g *Guard) carries(h holding) bool {
	return !h.dbMode() && h.token != 0 && g.closedTx.Load() != nil && g.rowsSeen.seen(h.key) && !g.dbCheck.multiPrimary.Load()
}

// ridesOn reports whether the Guard's claims ride with fn's first
// statement where they can (Options.ClaimWithFirstStatement, without
// batching, on a server whose row locks keep every writer out): its calls
// then pass the lock on once fn has returned, never at the claim (see
// attemptTx.handOn), whether their own claim rode or not, since the next
// holder's might.
func (g *Guard) ridesOn() bool {
	return g.opt.ClaimWithFirstStatement && g.opt.MaxBatch <= 1 && !g.dbCheck.multiPrimary.Load()
}

// makeClosedTx makes Guard.closedTx, once: a transaction of the pool, rolled
// back at once, whose statements fail with sql.ErrTxDone without touching a
// connection. It makes none, and claims carry no statement (neither fn's
// nor DoRead's), when the pool's sessions set sql_select_limit, which a
// SELECT in a compound statement does not obey.
func (g *Guard) makeClosedTx(ctx context.Context) error {
	if g.closedTx.Load() != nil {
		return nil
	}
	g.closing.Lock()
	defer g.closing.Unlock()
	if g.closedTx.Load() != nil {
		return nil
	}
	// The transaction keeps its ctx for the Guard's life: not the caller's.
	bctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	tx, err := g.db.BeginTxx(bctx, nil)
	if err != nil {
		return err
	}
	var limit uint64
	err = tx.GetContext(bctx, &limit, "SELECT @@sql_select_limit")
	if rerr := tx.Rollback(); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	if limit == math.MaxUint64 {
		g.closedTx.Store(tx)
	}
	return nil
}

// seenRows remembers, per slot of a small table that keys hash into, a
// key whose fence row a claim found. A key that shares its slot with
// another is forgotten now and then, which costs its claim a ride, never
// safety.
type seenRows [1024]atomic.Uint64

func (s *seenRows) slot(key string) (*atomic.Uint64, uint64) {
	h := keyHash(key)
	return &s[h%uint64(len(s))], h | 1
}

func (s *seenRows) mark(key string) {
	p, h := s.slot(key)
	p.Store(h)
}

func (s *seenRows) seen(key string) bool {
	p, h := s.slot(key)
	return p.Load() == h
}

// txClaim is the claim of a Tx whose claim rides with fn's first
// statement, until it is sent, and its outcome.
type txClaim struct {
	// deferred is set before fn runs, and never changes: the claim was left
	// to fn's statements.
	deferred bool
	sync.Mutex
	pending *claiming // the claim, until it is sent
	// live is the attempt's transaction, which Tx embeds once the claim
	// holds (until then, Guard.closedTx).
	live *sqlx.Tx
	// bare: nothing has marked the session yet (see session.go), so the
	// transaction is rolled back without redfence_rollback.
	bare bool
	err  error // the claim's failure, for the attempt
	// retry: the attempt may run again (see claiming.outcome).
	retry bool
	// step records the claim's step, on Do's goroutine (flushClaimStep).
	step func()
}

// deferClaim leaves the claim c to fn's statements. bare says that nothing
// marked the session yet; closed, when not nil, stands for the transaction
// in Tx's embedded *sqlx.Tx until the claim holds.
func (t *Tx) deferClaim(c *claiming, bare bool, closed *sqlx.Tx) {
	t.claim.deferred = true
	t.claim.pending = c
	t.claim.bare = bare
	t.claim.live = t.Tx
	if closed != nil {
		t.Tx = closed
	}
}

// flushClaimStep records the step of a claim that was sent since the last
// call: hooks run on Do's goroutine, and fn may send its first statement
// from another.
func (t *Tx) flushClaimStep() {
	if !t.claim.deferred {
		return
	}
	t.claim.Lock()
	f := t.claim.step
	t.claim.step = nil
	t.claim.Unlock()
	if f != nil {
		f()
	}
}

// bare reports whether nothing has marked the session: the claim, which
// was to ride, was never sent.
func (t *Tx) bare() bool {
	if !t.claim.deferred {
		return false
	}
	t.claim.Lock()
	defer t.claim.Unlock()
	return t.claim.bare
}

// claimPending reports whether the claim is still to be sent.
func (t *Tx) claimPending() bool {
	if t.txState == nil || !t.claim.deferred {
		return false
	}
	t.claim.Lock()
	defer t.claim.Unlock()
	return t.claim.pending != nil
}

// claimFailure returns the failure of a claim that rode (or was sent late),
// and whether the attempt may run again.
func (t *Tx) claimFailure() (retry bool, err error) {
	if !t.claim.deferred {
		return false, nil
	}
	t.claim.Lock()
	defer t.claim.Unlock()
	return t.claim.retry, t.claim.err
}

// sendClaim sends a pending claim on its own, or waits for the one under
// way, and returns the claim's failure, if it failed.
func (t *Tx) sendClaim(ctx context.Context) error {
	if t.txState == nil || !t.claim.deferred {
		return nil
	}
	t.claim.Lock()
	defer t.claim.Unlock()
	if t.claim.pending == nil {
		return t.claimErr()
	}
	rows, err := t.runClaim(ctx, &rideStmt{})
	if rows != nil {
		err = t.observe(rows.Close())
	}
	return err
}

// claimErr is the error of fn's statements once the claim failed.
func (t *Tx) claimErr() error {
	if t.claim.err == nil {
		return nil
	}
	return fmt.Errorf("guard: %q: the claim failed: %w", t.key, unwrapNoRow(t.claim.err))
}

// runClaim sends the pending claim, with r, and returns the rows of the
// compound statement after the claim's answer. t.claim is locked.
func (t *Tx) runClaim(ctx context.Context, r *rideStmt) (*sqlx.Rows, error) {
	c := t.claim.pending
	t.claim.pending = nil
	t.claim.bare = false
	rows, err := c.run(ctx, r)
	if err == nil {
		t.Tx = t.claim.live
		return rows, nil
	}
	t.claim.retry, t.claim.err = c.retry, err
	ferr := t.claimErr()
	t.fail(ferr, false)
	return nil, ferr
}

func unwrapNoRow(err error) error {
	if nr := (noFenceRow{}); errors.As(err, &nr) {
		return nr.error
	}
	return err
}

// ride sends the pending claim with query, and returns the rows of query's
// result. rode is false when there was no claim to send or query cannot
// carry it: the caller then sends query as usual (before sends the claim on
// its own first, or waits for the one under way).
func (t *Tx) ride(ctx context.Context, query string, args []any, exec bool) (rows *sqlx.Rows, rode bool, err error) {
	rows, _, rode, err = t.rideSet(ctx, query, args, exec)
	return rows, rode, err
}

// rideSet is ride, also reporting whether the statement answered with a
// result set: without one (SELECT … INTO), rows has no rows and is closed.
func (t *Tx) rideSet(ctx context.Context, query string, args []any, exec bool) (rows *sqlx.Rows, set, rode bool, err error) {
	if t.txState == nil || !t.claim.deferred {
		return nil, false, false, nil
	}
	r := newRide(query, args, exec)
	if r == nil {
		return nil, false, false, nil
	}
	if err := t.vet(ctx); err != nil {
		return nil, false, true, err
	}
	t.claim.Lock()
	if t.claim.pending == nil {
		t.claim.Unlock()
		return nil, false, false, nil
	}
	rows, err = t.runClaim(ctx, r)
	t.claim.Unlock()
	if err != nil {
		return nil, false, true, err
	}
	set, asIs, err := t.riddenResult(rows)
	switch {
	case asIs:
		return nil, false, false, nil
	case err != nil:
		return nil, false, true, err
	}
	return rows, set, true, nil
}

// selectNone is sqlx's Select of a statement that answered without a result
// set (SELECT … INTO): dest is checked as sqlx checks it, and its slice
// emptied.
func selectNone(dest any) error {
	v := reflect.ValueOf(dest)
	switch {
	case v.Kind() != reflect.Pointer:
		return errors.New("must pass a pointer, not a value, to StructScan destination")
	case v.IsNil():
		return errors.New("nil pointer passed to StructScan destination")
	}
	if t := reflectx.Deref(v.Type()); t.Kind() != reflect.Slice {
		return fmt.Errorf("expected %s but got %s", reflect.Slice, t.Kind())
	}
	v.Elem().SetLen(0)
	return nil
}

// riddenResult moves rows, the answer of a compound statement that carried
// a statement with the claim, to that statement's result set, and reports
// whether it has one. Without one, rows is closed, and either err is the
// statement's error or, with asIs, the statement cannot run as a prepared
// statement (ER_UNSUPPORTED_PS, ER_SP_BADSTATEMENT): the claim holds, so
// it goes as it is.
func (t *Tx) riddenResult(rows *sqlx.Rows) (ok, asIs bool, err error) {
	if rows.NextResultSet() {
		return true, false, nil
	}
	err = rows.Err()
	_ = rows.Close()
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == erUnsupportedPS || me.Number == erSPBadStatement) {
		return false, true, nil
	}
	return false, false, t.observe(err)
}

// rideExec is ExecContext's ride (see ride): the statement's affected rows
// and insert id come as a result set of their own.
func (t *Tx) rideExec(ctx context.Context, query string, args []any) (sql.Result, bool, error) {
	rows, rode, err := t.ride(ctx, query, args, true)
	if !rode || err != nil {
		return nil, rode, err
	}
	defer rows.Close()
	var affected int64
	var insertID uint64
	if !rows.Next() {
		return nil, true, t.observe(fmt.Errorf("guard: %q: no row count for the statement sent with the claim: %w", t.key, rows.Err()))
	}
	if err := rows.Scan(&affected, &insertID); err != nil {
		return nil, true, err
	}
	// The insert id has the bits of an unsigned 64-bit integer, as the
	// driver hands over an OK packet's.
	return rideResult{affected: affected, insertID: int64(insertID)}, true, t.observe(rows.Close())
}

// rideResult is the sql.Result of a statement that carried the claim.
type rideResult struct{ affected, insertID int64 }

func (r rideResult) LastInsertId() (int64, error) { return r.insertID, nil }
func (r rideResult) RowsAffected() (int64, error) { return r.affected, nil }

// scanOne is sqlx's Get for rows already sent: the first row into dest,
// a struct by its columns or a scannable value.
func scanOne(rows *sqlx.Rows, dest any) error {
	defer rows.Close()
	v := reflect.ValueOf(dest)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return errors.New("guard: Get needs a non-nil pointer destination")
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	base := reflectx.Deref(v.Type())
	if holdsRawBytes(rows.Mapper, base) {
		// As sqlx's Get: the bytes would point into the driver's buffer,
		// which the next statement overwrites.
		return errors.New("sql: RawBytes isn't allowed on Row.Scan")
	}
	var err error
	if scannable(rows.Mapper, base) {
		cols, cerr := rows.Columns()
		switch {
		case cerr != nil:
			return cerr
		case len(cols) > 1:
			return fmt.Errorf("scannable dest type %s with >1 columns (%d) in result", base.Kind(), len(cols))
		}
		err = rows.Scan(dest)
	} else {
		err = rows.StructScan(dest)
	}
	if err != nil {
		return err
	}
	return rows.Close()
}

var (
	scannerType = reflect.TypeFor[sql.Scanner]()
	valuerType  = reflect.TypeFor[driver.Valuer]()
)

var rawBytesType = reflect.TypeFor[sql.RawBytes]()

// holdsRawBytes reports whether a value of type t is, or has a field of
// type, sql.RawBytes.
func holdsRawBytes(m *reflectx.Mapper, t reflect.Type) bool {
	if t == rawBytesType {
		return true
	}
	if t.Kind() != reflect.Struct || scannable(m, t) {
		return false
	}
	for _, f := range m.TypeMap(t).Index {
		if f.Field.Type == rawBytesType {
			return true
		}
	}
	return false
}

// scannable reports whether a value of type t is scanned whole, as sqlx
// decides it: a Scanner, a type that is not a struct, or a struct without
// exported fields.
func scannable(m *reflectx.Mapper, t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(scannerType) || t.Kind() != reflect.Struct {
		return true
	}
	return len(m.TypeMap(t).Index) == 0
}

// riddenRows serves rows already sent to sqlx.SelectContext, which asks
// for them with QueryxContext.
type riddenRows struct{ rows *sqlx.Rows }

func (r riddenRows) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return r.rows.Rows, nil
}

func (r riddenRows) QueryxContext(context.Context, string, ...any) (*sqlx.Rows, error) {
	return r.rows, nil
}

func (r riddenRows) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	panic("guard: riddenRows serves QueryxContext only")
}
