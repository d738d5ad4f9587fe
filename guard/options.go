package guard

// options.go owns Options: their documented defaults, their validation
// (OptionError) and the deprecated flat fields that map to the groups.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/warnlog"
)

// Hooks are callbacks through which users plug metrics and tracing into a
// [Guard] (the extra/redfenceotel module builds OpenTelemetry spans and
// metrics on them). Every field may be nil. They run synchronously on the
// goroutine that calls Do, except OnLost, which runs on a goroutine of Do's
// own while fn may still be running; Do returns only after every hook call
// of that Do has returned. With Options.Batch.Max above 1, OnAcquired,
// OnRetry, OnFenced, OnLost and OnCommitted are called once per batch, on
// the batch's goroutine, and OnDo, OnStep and OnDone once per caller (see
// "Batching" in the package documentation). Hooks must be quick and must
// not call Do.
type Hooks struct {
	// OnAcquired is called when the lock has been granted, with the lock's
	// fencing token and the time spent waiting in the queue.
	OnAcquired func(key string, token uint64, wait time.Duration)
	// OnFenced is called when the database rejected token because the key's
	// fence row holds current (≥ token; 0 if it could not be read).
	OnFenced func(key string, token, current uint64)
	// OnLost is called once when the lock is found lost before Do finished.
	OnLost func(key string, token uint64)
	// OnRetry is called before attempt+1 runs, after attempt failed with the
	// retryable err (deadlock, lock wait timeout, connection lost).
	OnRetry func(key string, attempt int, err error)
	// OnCommitted is called after a successful COMMIT (or after Do found out
	// that a COMMIT whose reply was lost did commit), with the time since the
	// lock was granted.
	OnCommitted func(key string, token uint64, elapsed time.Duration)

	// OnModeChange is called when the Guard switches between Redis mode and
	// database mode (Options.Outage): from ModeRedis to ModeDatabase when
	// Redis is found unavailable, and back once it answers again.
	OnModeChange func(from, to Mode)

	// OnDo is called as a Do starts (after its input checks; not for a
	// nested call that joins an enclosing one), with Do's ctx and key. The
	// ctx it returns, which must be ctx or derived from it, replaces Do's ctx
	// for the rest of the call, fn's ctx included, and is the one passed to
	// OnStep and OnDone: a tracing hook starts a span here.
	OnDo func(ctx context.Context, key string) context.Context
	// OnStep is called when a stage of Do ends: the lock wait, each
	// attempt's claim, fn and COMMIT, and the unlock (see [Step]).
	OnStep func(ctx context.Context, s Step)
	// OnDone is called once when Do returns, with how it ended (see
	// [Result]).
	OnDone func(ctx context.Context, r Result)
}

// Options configure a [Guard]. The zero value (or a nil *Options) gives the
// defaults. A duration, when set, must be at least 1ms: a smaller one is
// almost surely a unit mistake (UnlockTimeout: 5 is 5ns, not 5s) and is
// refused. [Guard.Err] reports an invalid field as an [*OptionError] right
// after [New].
//
// The settings of one concern sit in a group: Outage (what Do does while
// Redis is unavailable), Batch (combining a key's queued callers) and
// Succession (how a key's lock and transaction pass to its next caller).
// The flat fields they replace, such as FallbackAfter and MaxBatch, still
// work but are deprecated: a group field and the flat field it replaces may
// both be set only to the same value, otherwise the options are invalid.
type Options struct {
	// MaxAttempts bounds how many times the whole transaction runs when an
	// attempt fails because its own transaction failed: a deadlock, a lock
	// wait timeout or a lost connection reported by one of its statements (or
	// by the claim, or before COMMIT). 1 disables retries.
	// default: 3
	MaxAttempts int

	// BackoffMin is the pause after the first failed attempt; it doubles
	// after each further failure up to BackoffMax. Each pause is jittered
	// uniformly into [d/2, d]. At least 1ms.
	// default: 10ms
	BackoffMin time.Duration

	// BackoffMax caps the pause between attempts. At least 1ms and at
	// least BackoffMin.
	// default: 500ms (or BackoffMin, if larger)
	BackoffMax time.Duration

	// UnlockTimeout bounds the Unlock that ends every Do. It runs on a fresh
	// context, so a caller whose ctx was cancelled still releases the lock.
	// At least 1ms.
	// default: 5s
	UnlockTimeout time.Duration

	// SettleTimeout bounds the check Do makes on a fresh connection when the
	// connection died during COMMIT, or during a statement that may have
	// ended the transaction (CALL and the like), to find out whether it
	// committed. Once the caller's ctx has ended, the check gets a second at
	// most. At least 1ms.
	// default: 10s
	SettleTimeout time.Duration

	// TxOptions are passed to BeginTx for every attempt. ReadOnly is refused:
	// the fence claim writes.
	// default: nil (the server's default isolation level)
	TxOptions *sql.TxOptions

	// ClaimWithFirstStatement sends the claim with fn's first statement
	// instead of before fn runs, which saves a Do one round trip to the
	// database. It applies when that statement is an UPDATE or DELETE sent
	// by Exec, or a SELECT sent by Query, Queryx, Get or Select, whose '?'
	// are all placeholders and whose arguments have literals the server binds
	// (integers from 0, doubles, strings without a backslash or NUL, NULL),
	// for a key whose fence row this Guard has seen, on a pool that does not
	// set sql_select_limit; otherwise the claim goes on its own before fn's
	// first statement, or, when fn sends none, before COMMIT.
	//
	// What changes for fn: it starts once the Redis lock is held, before
	// its claim is known. None of its statements runs before the claim
	// holds the fence row: a claim that fails (a stale token, a lost lock)
	// is the error of fn's first statement, which did not run, and Do then
	// handles the failure as it would have before fn; until then the
	// *sqlx.Tx that Tx embeds is a closed transaction, whose statements fail
	// with sql.ErrTxDone. The first statement's ctx also bounds the wait for
	// the previous holder's COMMIT. But whatever fn does before its first
	// statement outside the database (a call to another service, a file
	// written) is done even by a call that is then fenced: keep such work
	// after the first statement, or leave this off.
	//
	// The lock is passed on once fn has returned and the claim holds the
	// row, rather than at the claim, so that fn never runs at the same time
	// for one key; every process that locks the key must use the same
	// setting for that to hold across processes (the database keeps their
	// statements apart either way). That makes a hot key slower: this is
	// for keys seldom contended. Not with batching (Batch.Max > 1) or in
	// database mode, which claim before fn. A call whose fn begins with a
	// read saves the same round trip with [Guard.DoRead], where fn starts
	// only once its claim holds and the lock still passes on at the claim.
	//
	// A statement that carried the claim differs from one sent on its own
	// in that its results come in the text protocol (on a pool that
	// prepares statements, a BIGINT UNSIGNED above 1<<63 scans into an any
	// as a uint64 rather than as bytes), and in the column types reported
	// for a bare argument ("SELECT ?" of an int64: INT rather than BIGINT). Do not read tx.Tx or tx.Mapper on
	// one goroutine while another may send fn's first statement: the
	// embedded *sqlx.Tx is replaced when the claim holds.
	// default: false
	ClaimWithFirstStatement bool

	// Namespace names this Guard's fence rows apart from those of other lock
	// namespaces sharing the schema. Lockers with different prefixes hold
	// separate locks on one key; with one fence row per key they would fence
	// each other (spurious ErrFenced) and raise each other's token floors.
	// The fence row of key is named Namespace + "{" + key, or by a digest of
	// key for long keys (see [Guard.FenceResource]). It must not contain '{'
	// or '}', and must leave room for the digest form (at most
	// fence.MaxResourceLen-65 bytes).
	// default: the Locker's prefix (redislock.Options.Prefix), or none (the
	// fence row is named by the key alone) when that is
	// redislock.DefaultPrefix
	Namespace string

	// Outage says what Do does while Redis is unavailable; see
	// [OutageOptions].
	// default: Do fails while Redis is unavailable
	Outage OutageOptions

	// Batch combines the queued callers of a key into one transaction; see
	// [BatchOptions].
	// default: off (every Do runs its own transaction)
	Batch BatchOptions

	// Succession says how a key's lock and transaction pass from one caller
	// to the next; see [SuccessionOptions].
	// default: the lock is handed on at the claim (HandOffAuto) and
	// transactions are relayed between a key's callers
	Succession SuccessionOptions

	// Logger receives debug records of each step and warnings for lost
	// locks, fenced tokens, retries, failed unlocks and the switch to
	// database mode (Options.Outage).
	// default: slog.Default() for warnings and errors (looked up at each
	// record, so a later slog.SetDefault applies); records below
	// slog.LevelWarn, the debug records of each step among them, are
	// dropped. Set a logger to see those too, or
	// slog.New(slog.DiscardHandler) to silence everything.
	Logger *slog.Logger

	// Hooks are called at each step; see [Hooks].
	// default: no hooks
	Hooks Hooks

	// Fallback is Outage.Fallback.
	//
	// Deprecated: use Options.Outage.Fallback.
	Fallback Fallback

	// FallbackAfter is Outage.After.
	//
	// Deprecated: use Options.Outage.After.
	FallbackAfter int

	// FallbackRetry is Outage.Retry.
	//
	// Deprecated: use Options.Outage.Retry.
	FallbackRetry time.Duration

	// FallbackProbeAfter is Outage.ProbeAfter.
	//
	// Deprecated: use Options.Outage.ProbeAfter.
	FallbackProbeAfter time.Duration

	// FallbackProbeTimeout is Outage.ProbeTimeout.
	//
	// Deprecated: use Options.Outage.ProbeTimeout.
	FallbackProbeTimeout time.Duration

	// FallbackMaxWaiters is Outage.MaxWaiters.
	//
	// Deprecated: use Options.Outage.MaxWaiters.
	FallbackMaxWaiters int

	// FallbackMaxWaitersPerKey is Outage.MaxWaitersPerKey.
	//
	// Deprecated: use Options.Outage.MaxWaitersPerKey.
	FallbackMaxWaitersPerKey int

	// MaxBatch is Batch.Max.
	//
	// Deprecated: use Options.Batch.Max.
	MaxBatch int

	// BatchSavepoints is Batch.Savepoints.
	//
	// Deprecated: use Options.Batch.Savepoints.
	BatchSavepoints bool

	// HandOff is Succession.HandOff.
	//
	// Deprecated: use Options.Succession.HandOff.
	HandOff HandOff

	// NoRelay is Succession.NoRelay.
	//
	// Deprecated: use Options.Succession.NoRelay.
	NoRelay bool
}

// OutageOptions say what a [Guard] does while Redis is unavailable
// ([Options].Outage). The zero value fails every Do until Redis answers
// again; with Fallback set to FallbackDatabase, the other fields tune when
// the Guard switches to database mode and back, and how many callers it
// lets wait in the database.
type OutageOptions struct {
	// Fallback says what Do does while Redis is unavailable: fail
	// (FallbackNone) or serialise the callers of a key in the database alone
	// (FallbackDatabase; see [Fallback] for the trade-off: safety is kept,
	// fairness and connection-free waiting are not).
	// default: FallbackNone
	Fallback Fallback

	// After is how many consecutive failures of Redis (errors of the lock
	// other than the caller's ctx ending, and health probes that got no
	// answer) switch the Guard to database mode. A Do whose own lock call
	// failed because of Redis runs in database mode at once.
	// default: 3
	After int

	// Retry is how long the Guard stays in database mode before one Do
	// tries Redis again; when it succeeds, the Guard is back in Redis mode.
	// At least 1ms.
	// default: 1s
	Retry time.Duration

	// ProbeAfter is how long a Do waits for the Redis lock before a health
	// probe (a PING, at most one per ProbeAfter per Guard) checks that Redis
	// still answers; a Redis that stopped answering is thus noticed by
	// waiting callers, which then switch to database mode. At least 1ms.
	// default: 250ms
	ProbeAfter time.Duration

	// ProbeTimeout is how long a health probe waits for Redis. At least
	// 1ms.
	// default: 250ms
	ProbeTimeout time.Duration

	// MaxWaiters bounds the Do calls of this Guard in database mode at once
	// (each holds a database connection while it waits for the fence row);
	// more wait without a connection. It must leave room in the pool: at
	// most sql.DB.SetMaxOpenConns when that is set.
	// default: 8, or half of the pool's MaxOpenConns when that is smaller
	MaxWaiters int

	// MaxWaitersPerKey bounds the database-mode calls of one key at once,
	// so that one hot key cannot take the whole pool.
	// default: 2
	MaxWaitersPerKey int
}

// BatchOptions combine the callers of a key in this process that queue
// behind its lock into shared transactions ([Options].Batch). The zero value
// turns batching off: every Do runs its own transaction.
type BatchOptions struct {
	// Max, when above 1, combines callers: the callers of one key in this
	// process that arrive while the key's current batch waits for or holds
	// the lock join the next batch, up to Max of them, and that batch runs
	// each caller's fn in turn inside one transaction, under one lock turn,
	// one claim and one COMMIT. An error of one caller undoes only its
	// work: the batch rolls back and runs the others again, each inside a
	// savepoint of its own (see Savepoints). See "Batching" in the package
	// documentation for when it pays and what it costs. 0 and 1 turn it
	// off.
	// default: 0 (every Do runs its own transaction)
	Max int

	// Savepoints runs each fn of a batch of more than one caller inside a
	// savepoint of its own from the start, one more round trip per caller,
	// so that an fn's error is undone by rolling back to it. By default a
	// batch runs its fns without savepoints, and when one returns an error
	// (or panics) rolls the whole transaction back and runs the others
	// again, with savepoints: cheaper while errors are rare, and never more
	// than one fn's work done twice per error. Set it when fns often fail,
	// or are expensive to run again.
	// default: false
	Savepoints bool
}

// SuccessionOptions say how a key's Redis lock and its transaction pass
// from one caller to the key's next ([Options].Succession). The zero value
// hands the lock on at the claim (except on a multi-primary pool) and
// relays transactions between a key's callers in this process.
type SuccessionOptions struct {
	// HandOff says when Do passes the Redis lock on to the key's next
	// waiter.
	//
	// HandOffAtClaim passes it on as soon as the attempt's claim holds the
	// fence row, before fn runs. The fence row's lock, which the
	// transaction keeps until it ends, then keeps the next holder out: its
	// grant, BEGIN and claim run while fn and COMMIT do, and its claim
	// returns the moment this transaction ends. The serial path of a hot
	// key shrinks to the database's own: claim, fn's statements, COMMIT.
	// fn's ctx ends when the transaction is lost rather than when the lease
	// is, a retry takes a new turn and token, at most two transactions of a
	// key (one running, one waiting for the row) hold connections, and a
	// holder stopped inside fn delays the next one up to
	// innodb_lock_wait_timeout per attempt. It relies on the fence row's
	// lock, so every Guard that takes the same Redis lock (the same Locker
	// prefix and key) must claim the same fence row in the same database:
	// the same Namespace and pool; Guards that share a lock but fence in
	// different databases or namespaces would run fn at once. Row locks do
	// not reach the other members of a Galera cluster or of Group
	// Replication in multi-primary mode, so on such a pool Do refuses it
	// ([ErrUnsafePool]). The next holder's claim waits at most
	// innodb_lock_wait_timeout per attempt, so an fn that runs longer makes
	// the key's waiting callers fail after MaxAttempts. A Do nested in fn
	// on another key needs two connections per enclosing call (its
	// transaction, and the next holder's claim waiting on its fence row);
	// [ErrNestedPool] refuses one the pool cannot serve.
	//
	// HandOffAtEnd holds the lock until the transaction has ended: fn's
	// ctx ends when the lease is lost, and a retry keeps its turn and
	// token, but the unlock, the next holder's grant, BEGIN and claim add
	// to the serial path, which about doubles it for a hot key.
	//
	// HandOffAuto is HandOffAtClaim, except on a Galera node or a Group
	// Replication member in multi-primary mode (found by the pool check,
	// see [Guard.CheckDatabase]), where it is HandOffAtEnd. With any other
	// setup where several servers take writes, set HandOffAtEnd.
	//
	// See "When the lock is handed on" in the package documentation. With
	// Options.Batch, a batch hands the lock on at its claim and the key's
	// next batch here starts its turn then. It does not apply in database
	// mode (Options.Outage).
	// default: HandOffAuto
	HandOff HandOff

	// NoRelay turns off relaying. By default a committing Do hands its
	// connection, with a new transaction already open on it (COMMIT AND
	// CHAIN), to the next Do on the same key in this process, instead of
	// returning it to the pool: that Do sends its claim at once, without a
	// BEGIN and without queueing for the pool behind the callers of other
	// keys. A Do with no other caller of its key here uses the pool as
	// usual; a relayed transaction nobody takes within 50ms is rolled back
	// and its connection returned, and a connection relayed for half a
	// second goes back to the pool, so that other keys get their turn. See
	// "Relaying transactions between a key's callers" in the package
	// documentation. With Options.Batch, a batch counts as one caller. With
	// NoRelay, every transaction begins on the pool and every connection
	// goes back to it.
	// default: false (transactions are relayed between a key's callers)
	NoRelay bool
}

// maxNamespaceLen leaves room in a fence resource for the namespace, a brace
// and the 64 hex digits of a key's digest.
const maxNamespaceLen = fence.MaxResourceLen - 65

const (
	defaultMaxAttempts   = 3
	defaultBackoffMin    = 10 * time.Millisecond
	defaultBackoffMax    = 500 * time.Millisecond
	defaultUnlockTimeout = 5 * time.Second
	defaultSettleTimeout = 10 * time.Second

	defaultFallbackAfter   = 3
	defaultFallbackRetry   = time.Second
	defaultFallbackProbe   = 250 * time.Millisecond
	defaultFallbackPerKey  = 2
	defaultFallbackWaiters = 8
)

// minDuration is the shortest duration option that can work: a pause, a
// timeout or an interval below it is almost surely a unit mistake (5 meant
// as 5s is 5ns), which would drop every unlock or spin on Redis.
const minDuration = time.Millisecond

// OptionError is the error of a [Guard] made from an invalid field of
// [Options] (see [Guard.Err]): it names the field, the value set and the rule
// it breaks. It matches [ErrInvalidOptions]; its message, such as
// "Options.UnlockTimeout is 5ns, below 1ms", comes after the "guard: invalid
// options" of the error that wraps it.
type OptionError struct {
	Field  string // the field of Options, such as "UnlockTimeout"
	Value  any    // the value it was set to
	Reason string // the rule the value breaks
}

// Error names the field, its value and the rule.
func (e *OptionError) Error() string {
	if s, ok := e.Value.(string); ok {
		return fmt.Sprintf("Options.%s is %q, %s", e.Field, s, e.Reason)
	}
	return fmt.Sprintf("Options.%s is %v, %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidOptions].
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// Err returns the error every Do of g would return, before touching anything,
// because of how g was made: an error wrapping [ErrInvalidGuard] for a nil or
// zero Guard, a nil Locker or DB, invalid [Options] (then it also matches
// [ErrInvalidOptions], and names the field and value), or a Locker whose own
// Err is not nil (then it also matches redislock.ErrInvalidOptions). It
// returns nil otherwise and contacts nobody: check it right after [New], so
// that a program refuses to start rather than fail on every call. It does not
// check the database pool ([Guard.CheckDatabase] does) or the servers.
func (g *Guard) Err() error {
	if err := g.usable(); err != nil {
		return err
	}
	if err := g.locker.Err(); err != nil {
		return fmt.Errorf("%w: locker: %w", ErrInvalidGuard, err)
	}
	return nil
}

// withPool checks and completes the options that depend on the database
// pool: FallbackMaxWaiters must leave connections for the rest of the
// application. It copies Outage.MaxWaiters to FallbackMaxWaiters (merge
// leaves that to it, so that its error names the field the value was set
// in) and its results back to Outage.
func (o Options) withPool(maxOpen int) (Options, error) {
	field := "Outage.MaxWaiters"
	if o.FallbackMaxWaiters != 0 {
		field = "FallbackMaxWaiters"
	}
	o.FallbackMaxWaiters = o.Outage.MaxWaiters
	if o.Fallback != FallbackDatabase {
		return o, nil
	}
	if o.FallbackMaxWaiters == 0 {
		o.FallbackMaxWaiters = defaultFallbackWaiters
		if maxOpen > 0 {
			o.FallbackMaxWaiters = max(1, min(o.FallbackMaxWaiters, maxOpen/2))
		}
	}
	if maxOpen > 0 && o.FallbackMaxWaiters > maxOpen {
		return o, &OptionError{Field: field, Value: o.FallbackMaxWaiters,
			Reason: fmt.Sprintf("more than the pool's %d connections (sql.DB.SetMaxOpenConns)", maxOpen)}
	}
	if o.FallbackMaxWaitersPerKey > o.FallbackMaxWaiters {
		o.FallbackMaxWaitersPerKey = o.FallbackMaxWaiters
	}
	o.Outage.MaxWaiters, o.Outage.MaxWaitersPerKey = o.FallbackMaxWaiters, o.FallbackMaxWaitersPerKey
	return o, nil
}

// merge reconciles each field of the groups (Outage, Batch, Succession) with
// the deprecated flat field it replaces, so that both hold the value set in
// either: the rest of the package reads the flat fields. It returns, for
// each flat field whose value came from its group, the group field's name,
// for errors about the value, and an *OptionError for the first pair set to
// different values. Outage.MaxWaiters, which depends on the pool, is only
// checked: withPool copies it to FallbackMaxWaiters.
func (o *Options) merge() (map[string]string, error) {
	from := map[string]string{}
	out, b, su := &o.Outage, &o.Batch, &o.Succession
	flatWaiters := o.FallbackMaxWaiters
	for _, err := range []error{
		reconcile(from, &out.Fallback, &o.Fallback, "Outage.Fallback", "Fallback"),
		reconcile(from, &out.After, &o.FallbackAfter, "Outage.After", "FallbackAfter"),
		reconcile(from, &out.Retry, &o.FallbackRetry, "Outage.Retry", "FallbackRetry"),
		reconcile(from, &out.ProbeAfter, &o.FallbackProbeAfter, "Outage.ProbeAfter", "FallbackProbeAfter"),
		reconcile(from, &out.ProbeTimeout, &o.FallbackProbeTimeout, "Outage.ProbeTimeout", "FallbackProbeTimeout"),
		reconcile(from, &out.MaxWaiters, &o.FallbackMaxWaiters, "Outage.MaxWaiters", "FallbackMaxWaiters"),
		reconcile(from, &out.MaxWaitersPerKey, &o.FallbackMaxWaitersPerKey, "Outage.MaxWaitersPerKey", "FallbackMaxWaitersPerKey"),
		reconcile(from, &b.Max, &o.MaxBatch, "Batch.Max", "MaxBatch"),
		reconcile(from, &b.Savepoints, &o.BatchSavepoints, "Batch.Savepoints", "BatchSavepoints"),
		reconcile(from, &su.HandOff, &o.HandOff, "Succession.HandOff", "HandOff"),
		reconcile(from, &su.NoRelay, &o.NoRelay, "Succession.NoRelay", "NoRelay"),
	} {
		if err != nil {
			return nil, err
		}
	}
	o.FallbackMaxWaiters = flatWaiters
	return from, nil
}

// reconcile makes a group field and the deprecated flat field it replaces
// hold the same value: the one that is set (not zero). Both set to
// different values is an *OptionError naming both.
func reconcile[T comparable](from map[string]string, group, flat *T, name, flatName string) error {
	var zero T
	switch {
	case *group == zero:
		*group = *flat
	case *flat == zero || *flat == *group:
		*flat = *group
		from[flatName] = name
	default:
		return &OptionError{Field: name, Value: *group,
			Reason: fmt.Sprintf("but the deprecated Options.%s is %v: set only Options.%s", flatName, *flat, name)}
	}
	return nil
}

// durations lists every duration field of o with its default, for the checks
// of withDefaults; those of the groups are checked through the flat fields
// merge has copied them to.
func (o *Options) durations() []struct {
	name string
	v    time.Duration
	def  time.Duration
} {
	return []struct {
		name string
		v    time.Duration
		def  time.Duration
	}{
		{"BackoffMin", o.BackoffMin, defaultBackoffMin}, {"BackoffMax", o.BackoffMax, defaultBackoffMax},
		{"UnlockTimeout", o.UnlockTimeout, defaultUnlockTimeout}, {"SettleTimeout", o.SettleTimeout, defaultSettleTimeout},
		{"FallbackRetry", o.FallbackRetry, defaultFallbackRetry}, {"FallbackProbeAfter", o.FallbackProbeAfter, defaultFallbackProbe},
		{"FallbackProbeTimeout", o.FallbackProbeTimeout, defaultFallbackProbe},
	}
}

// withDefaults validates o and returns a copy with every default applied,
// each group field and the deprecated flat field it replaces holding the
// same value (see merge; the pool completes Outage.MaxWaiters in withPool).
// An error is an *OptionError naming the first invalid field as the user
// set it.
func (o Options) withDefaults() (Options, error) {
	from, err := o.merge()
	if err != nil {
		return o, err
	}
	// bad names the field the user set: a group's field, or the flat one.
	bad := func(field string, value any, format string, args ...any) (Options, error) {
		if name, ok := from[field]; ok {
			field = name
		}
		return o, &OptionError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
	}
	for _, d := range o.durations() {
		switch {
		case d.v < 0:
			return bad(d.name, d.v, "must not be negative (0 selects the default, %v)", d.def)
		case d.v > 0 && d.v < minDuration:
			return bad(d.name, d.v, "below %v: too short to work (0 selects the default, %v; 5 is 5ns, 5*time.Second is 5s)",
				minDuration, d.def)
		}
	}
	switch {
	case o.MaxAttempts < 0:
		return bad("MaxAttempts", o.MaxAttempts, "must be >= 0")
	case o.BackoffMax > 0 && o.BackoffMax < o.BackoffMin:
		return bad("BackoffMax", o.BackoffMax, "below Options.BackoffMin (%v)", o.BackoffMin)
	case strings.ContainsAny(o.Namespace, "{}"):
		return bad("Namespace", o.Namespace, "contains '{' or '}'")
	case len(o.Namespace) > maxNamespaceLen:
		return bad("Namespace", o.Namespace, "%d bytes, more than %d", len(o.Namespace), maxNamespaceLen)
	case o.MaxBatch < 0:
		return bad("MaxBatch", o.MaxBatch, "must be >= 0")
	case o.HandOff < HandOffAuto || o.HandOff > HandOffAtEnd:
		return bad("HandOff", o.HandOff, "not HandOffAuto, HandOffAtClaim or HandOffAtEnd")
	case o.TxOptions != nil && o.TxOptions.ReadOnly:
		return bad("TxOptions.ReadOnly", true, "but the fence claim writes")
	}
	switch {
	case o.Fallback < FallbackNone || o.Fallback > FallbackDatabase:
		return bad("Fallback", o.Fallback, "not FallbackNone or FallbackDatabase")
	case o.FallbackAfter < 0:
		return bad("FallbackAfter", o.FallbackAfter, "must be >= 0")
	case o.Outage.MaxWaiters < 0:
		return bad("FallbackMaxWaiters", o.Outage.MaxWaiters, "must be >= 0")
	case o.FallbackMaxWaitersPerKey < 0:
		return bad("FallbackMaxWaitersPerKey", o.FallbackMaxWaitersPerKey, "must be >= 0")
	}
	o.fillDefaults()
	o.Outage = OutageOptions{Fallback: o.Fallback, After: o.FallbackAfter, Retry: o.FallbackRetry,
		ProbeAfter: o.FallbackProbeAfter, ProbeTimeout: o.FallbackProbeTimeout,
		MaxWaiters: o.Outage.MaxWaiters, MaxWaitersPerKey: o.FallbackMaxWaitersPerKey}
	o.Batch = BatchOptions{Max: o.MaxBatch, Savepoints: o.BatchSavepoints}
	o.Succession = SuccessionOptions{HandOff: o.HandOff, NoRelay: o.NoRelay}
	return o, nil
}

// fillDefaults sets every field left at zero to its default, but the
// fallback's MaxWaiters, which depends on the pool (see withPool).
func (o *Options) fillDefaults() {
	if o.FallbackAfter == 0 {
		o.FallbackAfter = defaultFallbackAfter
	}
	if o.FallbackRetry == 0 {
		o.FallbackRetry = defaultFallbackRetry
	}
	if o.FallbackProbeAfter == 0 {
		o.FallbackProbeAfter = defaultFallbackProbe
	}
	if o.FallbackProbeTimeout == 0 {
		o.FallbackProbeTimeout = defaultFallbackProbe
	}
	if o.FallbackMaxWaitersPerKey == 0 {
		o.FallbackMaxWaitersPerKey = defaultFallbackPerKey
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	if o.BackoffMin == 0 {
		o.BackoffMin = defaultBackoffMin
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = max(defaultBackoffMax, o.BackoffMin)
	}
	if o.UnlockTimeout == 0 {
		o.UnlockTimeout = defaultUnlockTimeout
	}
	if o.SettleTimeout == 0 {
		o.SettleTimeout = defaultSettleTimeout
	}
	if o.Logger == nil {
		o.Logger = warnlog.New()
	}
}
