package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

// maxNamespaceLen is guard's limit: room is left in a fence resource for the
// namespace, a brace and a 64-digit digest.
const maxNamespaceLen = fence.MaxResourceLen - 65

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) (jsonOut bool, err error) {
	var c config
	fs := newFlagSet("inspect", "inspect [flags] KEY", &c, stderr)
	pos, err := parse(fs, &c, args)
	if err != nil {
		return c.json, err
	}
	if len(pos) != 1 {
		return c.json, usageErrorf("inspect takes one KEY, got %d arguments", len(pos))
	}
	key := pos[0]
	if _, err := redislock.KeyNamesFor(c.prefix, key); err != nil {
		return c.json, usageErrorf("%v", err)
	}
	if strings.ContainsAny(c.namespace, "{}") || len(c.namespace) > maxNamespaceLen {
		return c.json, usageErrorf("-namespace %q: must not contain '{' or '}', at most %d bytes", c.namespace, maxNamespaceLen)
	}
	if _, err := mysqlConfig(&c); err != nil {
		return c.json, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	rdb, err := openRedis(ctx, &c)
	if err != nil {
		return c.json, err
	}
	defer rdb.Close()
	db, cfg, err := openMySQL(ctx, &c)
	if err != nil {
		return c.json, err
	}
	defer db.Close()

	info, err := redislock.Inspect(ctx, rdb, c.prefix, key)
	if err != nil {
		return c.json, err
	}
	// The fence row is named by guard's rule; a Guard is built only to ask it.
	locker := redislock.New(rdb, &redislock.Options{Prefix: c.prefix})
	resource := guard.New(locker, db, &guard.Options{Namespace: c.namespace}).FenceResource(key)
	_ = locker.Close()
	f, err := fence.Lookup(ctx, db, resource)
	var row *fence.Fence
	switch {
	case err == nil:
		row = &f
	case errors.Is(err, fence.ErrNoFence):
	default:
		if me, ok := errors.AsType[*mysql.MySQLError](err); ok && me.Number == 1146 { // ER_NO_SUCH_TABLE
			return c.json, fmt.Errorf("database %q has no fence table (run: redfence migrate up): %w", cfg.DBName, err)
		}
		return c.json, err
	}

	out := newInspectJSON(c.prefix, info, resource, row)
	if noState(info) {
		rep, err := scanPrefixes(ctx, rdb, c.prefix, strings.TrimSuffix(info.Names.Lock, "lock"))
		if err != nil {
			return c.json, fmt.Errorf("looking for the key under other prefixes: %w", err)
		}
		out.PrefixEmpty, out.OtherPrefixes = rep.empty, append(out.OtherPrefixes, rep.others...)
	}
	if c.json {
		writeJSON(stdout, out)
	} else {
		writeInspectText(stdout, out, info)
	}
	return c.json, nil
}

// inspectJSON is the output of inspect -json. Its field names are stable.
type inspectJSON struct {
	Key              string        `json:"key"`
	Prefix           string        `json:"prefix"`
	RedisKeys        redisKeysJSON `json:"redis_keys"`
	ServerTime       time.Time     `json:"server_time"` // Redis server clock
	Holder           *holderJSON   `json:"holder"`      // null when free
	Queue            []waiterJSON  `json:"queue"`       // next holder first; [] when empty
	StoredToken      uint64        `json:"stored_token"`
	StoredTokenTTLMs int64         `json:"stored_token_ttl_ms"` // 0 absent, -1 no expiry
	Released         int           `json:"released"`            // releases remembered for retried unlocks
	FenceResource    string        `json:"fence_resource"`
	Fence            *fenceJSON    `json:"fence"`    // null when the row does not exist
	Problems         []string      `json:"problems"` // [] when none
	// When the lock has no state in Redis under Prefix, which may be the
	// wrong one: PrefixEmpty says that no Redis key at all starts with
	// Prefix, OtherPrefixes lists prefixes under which the key has state
	// ([] when none). Both come from a SCAN of a bounded part of the
	// keyspace.
	PrefixEmpty   bool     `json:"prefix_empty"`
	OtherPrefixes []string `json:"other_prefixes"`
}

// noState reports whether info shows nothing of the lock in Redis.
func noState(info redislock.LockInfo) bool {
	return info.Holder == nil && len(info.Queue) == 0 && info.StoredTokenTTL == 0 && info.Released == 0
}

type redisKeysJSON struct {
	Lock     string `json:"lock"`
	Token    string `json:"token"`
	Queue    string `json:"queue"`
	Waiters  string `json:"waiters"`
	Channel  string `json:"channel"` // the start of each waiting Locker's channel, <channel>:<Locker id>
	Released string `json:"released"`
}

type holderJSON struct {
	Owner        string   `json:"owner"`
	Token        uint64   `json:"token"`
	Acquisitions []string `json:"acquisitions"`
	LeaseLeftMs  int64    `json:"lease_left_ms"` // -1 no expiry
}

type waiterJSON struct {
	Position          int        `json:"position"` // 1 = next holder
	ID                string     `json:"id"`
	Owner             string     `json:"owner"`
	Seq               uint64     `json:"seq"`
	HeartbeatDeadline *time.Time `json:"heartbeat_deadline"` // null when missing
	ExpiresInMs       int64      `json:"expires_in_ms"`      // negative once passed
	HandOffLeaseMs    int64      `json:"hand_off_lease_ms"`
	Expired           bool       `json:"expired"`
}

type fenceJSON struct {
	Resource  string    `json:"resource"`
	Token     uint64    `json:"token"`
	Owner     string    `json:"owner"`
	OpID      string    `json:"op_id"`
	Claims    uint64    `json:"claims"`
	UpdatedAt time.Time `json:"updated_at"`
}

func newInspectJSON(prefix string, info redislock.LockInfo, resource string, row *fence.Fence) inspectJSON {
	out := inspectJSON{
		Key: info.Key, Prefix: prefix, ServerTime: info.ServerTime.UTC(),
		RedisKeys: redisKeysJSON{Lock: info.Names.Lock, Token: info.Names.Token, Queue: info.Names.Queue,
			Waiters: info.Names.Waiters, Channel: info.Names.Channel, Released: info.Names.Released},
		Queue:       []waiterJSON{},
		StoredToken: info.StoredToken, StoredTokenTTLMs: ms(info.StoredTokenTTL), Released: info.Released,
		FenceResource: resource, Problems: append([]string{}, info.Problems...), OtherPrefixes: []string{},
	}
	if h := info.Holder; h != nil {
		out.Holder = &holderJSON{Owner: h.Owner, Token: h.Token, Acquisitions: append([]string{}, h.Acquisitions...),
			LeaseLeftMs: ms(h.LeaseLeft)}
	}
	for i, w := range info.Queue {
		wj := waiterJSON{Position: i + 1, ID: w.ID, Owner: w.Owner, Seq: w.Seq, HandOffLeaseMs: ms(w.HandOffLease), Expired: w.Expired}
		if !w.Deadline.IsZero() {
			d := w.Deadline.UTC()
			wj.HeartbeatDeadline, wj.ExpiresInMs = &d, ms(w.Deadline.Sub(info.ServerTime))
		}
		out.Queue = append(out.Queue, wj)
	}
	if row != nil {
		out.Fence = &fenceJSON{Resource: row.Resource, Token: row.Token, Owner: row.Owner, OpID: row.OpID,
			Claims: row.Claims, UpdatedAt: row.UpdatedAt.UTC()}
	}
	return out
}

func ms(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

func writeInspectText(w io.Writer, out inspectJSON, info redislock.LockInfo) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-14s%s\n", label, fmt.Sprintf(format, args...))
	}
	line("key", "%q", out.Key)
	line("redis keys", "%s  (:token :q :w :rel and the channels :ch:* beside it; prefix %q)", out.RedisKeys.Lock, out.Prefix)
	if h := out.Holder; h == nil {
		line("holder", "none, the lock is free")
	} else {
		line("holder", "owner %q, token %d, lease left %s, acquisitions %s",
			h.Owner, h.Token, leaseText(info.Holder.LeaseLeft), strings.Join(h.Acquisitions, " "))
	}
	if len(out.Queue) == 0 {
		line("queue", "empty")
	} else {
		line("queue", "%d waiting, next holder first", len(out.Queue))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  #\tOWNER\tID\tHEARTBEAT DEADLINE\tHAND-OFF LEASE\n")
		for i, wt := range info.Queue {
			fmt.Fprintf(tw, "  %d\t%q\t%s\t%s\t%v\n", i+1, wt.Owner, wt.ID, deadlineText(wt, info.ServerTime), wt.HandOffLease)
		}
		_ = tw.Flush()
	}
	if out.StoredTokenTTLMs == 0 {
		line("stored token", "none (the next token is the server time in µs)")
	} else {
		line("stored token", "%d, kept %s (every later token is larger)", out.StoredToken, leaseText(info.StoredTokenTTL))
	}
	if f := out.Fence; f == nil {
		line("fence row", "%q: none (never claimed)", out.FenceResource)
	} else {
		line("fence row", "%q: token %d, owner %q, op id %q, claims %d, updated %s",
			f.Resource, f.Token, f.Owner, f.OpID, f.Claims, f.UpdatedAt.Format(time.RFC3339Nano))
	}
	for _, p := range out.Problems {
		line("problem", "%s", p)
	}
	if out.PrefixEmpty {
		line("prefix", "no Redis key at all starts with %q: is -prefix the Lockers' redislock.Options.Prefix?", out.Prefix+":")
	}
	if len(out.OtherPrefixes) > 0 {
		quoted := make([]string, len(out.OtherPrefixes))
		for i, p := range out.OtherPrefixes {
			quoted[i] = fmt.Sprintf("%q", p)
		}
		line("prefix", "%q has lock state under prefix %s: pass -prefix %q", out.Key, strings.Join(quoted, ", "), out.OtherPrefixes[0])
	}
}

func leaseText(d time.Duration) string {
	if d < 0 {
		return "forever (no expiry)"
	}
	return d.Round(time.Millisecond).String()
}

func deadlineText(w redislock.Waiter, now time.Time) string {
	if w.Deadline.IsZero() {
		return "missing (dead)"
	}
	left := w.Deadline.Sub(now).Round(time.Millisecond)
	if w.Expired {
		return fmt.Sprintf("passed %v ago (dead)", -left)
	}
	return fmt.Sprintf("in %v", left)
}
