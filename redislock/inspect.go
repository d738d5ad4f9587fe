package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptInspect only reads; it is kept apart from the scripts a Locker runs.
var scriptInspect = newScript("inspect.lua")

// LockInfo is the state of one lock in Redis at one instant, as read by
// [Inspect].
type LockInfo struct {
	Key   string
	Names KeyNames
	// ServerTime is the Redis server's clock when the state was read; the
	// lease and heartbeat deadlines are on that clock.
	ServerTime time.Time
	// Holder is nil when the lock is free.
	Holder *Holder
	// Queue lists the waiters in the order they will get the lock.
	Queue []Waiter
	// StoredToken is the last token minted for the key, or a floor raised
	// above it with [Locker.RaiseTokenFloor]: the next token is larger. 0
	// when the token key is absent (expired or lost), which is safe, see
	// [Options.TokenTTL].
	StoredToken uint64
	// StoredTokenTTL is how long the token key lives unless used again; 0
	// when it is absent, -1 when it has no expiry.
	StoredTokenTTL time.Duration
	// Released is how many recent releases are remembered, so that a
	// retried Unlock of one of them is answered as applied.
	Released int
	// Problems describes state the scripts would not leave behind (a
	// malformed value, a lock without lease, heartbeats of ids not queued).
	// The scripts tolerate and repair it; it points at another writer of the
	// keys or a changed layout.
	Problems []string
}

// Holder is the holder of a lock.
type Holder struct {
	Owner string
	Token uint64
	// Acquisitions are the ids of the owner's acquisitions not yet
	// unlocked: more than one when it holds the lock reentrantly.
	Acquisitions []string
	// LeaseLeft is how long the lock lives unless renewed; -1 when it has
	// no expiry.
	LeaseLeft time.Duration
}

// Waiter is one entry of a lock's wait queue.
type Waiter struct {
	// ID is the waiting acquisition's id.
	ID    string
	Owner string
	// Seq is the entry's place in the queue: the server time in µs when it
	// was queued, made strictly increasing.
	Seq uint64
	// Deadline is when the entry counts as dead unless the waiter calls again
	// (its heartbeat); zero when the entry has no heartbeat.
	Deadline time.Time
	// HandOffLease is the lease a hand-off to this waiter starts with.
	HandOffLease time.Duration
	// Expired reports that Deadline had passed (or was missing) at
	// ServerTime: the waiter stopped calling, and the first caller to find
	// the entry at the head of the queue drops it.
	Expired bool
}

// Inspect reads the state of the lock named key under prefix (the
// Options.Prefix of the Lockers that take it; "" for [DefaultPrefix]) in one
// script, so that holder, queue and stored token are one consistent
// snapshot. It changes nothing. rdb is any client a [Locker] accepts.
//
// ctx bounds the request. Errors wrap [ErrInvalidKey], [ErrInvalidOptions]
// (bad prefix, nil client) or the Redis error.
func Inspect(ctx context.Context, rdb redis.UniversalClient, prefix, key string) (LockInfo, error) {
	names, err := KeyNamesFor(prefix, key)
	if err != nil {
		return LockInfo{}, err
	}
	if rdb == nil {
		return LockInfo{}, fmt.Errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	if prefix == "" {
		prefix = defaultPrefix
	}
	res, err := scriptInspect.Run(ctx, rdb, keysFor(prefix, key).all()).Slice()
	if err != nil {
		return LockInfo{}, fmt.Errorf("redislock: inspect %q: %w", key, named(rdb, err))
	}
	info, err := parseInspect(res)
	if err != nil {
		return LockInfo{}, fmt.Errorf("redislock: inspect %q: %w", key, err)
	}
	info.Key, info.Names = key, names
	return info, nil
}

// parseInspect turns inspect.lua's reply into a LockInfo; an error means the
// reply itself is not what the script returns.
func parseInspect(res []any) (LockInfo, error) {
	var info LockInfo
	if len(res) != 6 {
		return info, fmt.Errorf("unexpected reply %v", res)
	}
	nowus, err := strconv.ParseInt(str(res[0]), 10, 64)
	if err != nil {
		return info, fmt.Errorf("server time %v: %w", res[0], err)
	}
	info.ServerTime = time.UnixMicro(nowus)
	problem := func(format string, args ...any) { info.Problems = append(info.Problems, fmt.Sprintf(format, args...)) }

	if held, _ := res[1].([]any); len(held) == 5 {
		h := &Holder{Owner: str(held[4]), LeaseLeft: pttl(held[1])}
		if tok := str(held[2]); tok == "" {
			problem("malformed lock value %q", str(held[0]))
		} else if h.Token, err = strconv.ParseUint(tok, 10, 64); err != nil {
			problem("lock token %q: %v", tok, err)
		}
		h.Acquisitions = strings.Fields(str(held[3]))
		if len(h.Acquisitions) == 0 && str(held[2]) != "" {
			problem("lock value %q names no acquisition", str(held[0]))
		}
		if h.LeaseLeft < 0 {
			problem("lock has no lease (no expiry)")
		}
		info.Holder = h
	}

	if stored, _ := res[2].([]any); len(stored) == 2 {
		tok := str(stored[0])
		if info.StoredToken, err = strconv.ParseUint(tok, 10, 64); err != nil {
			problem("stored token %q: %v", tok, err)
		}
		info.StoredTokenTTL = pttl(stored[1])
	}

	queue, _ := res[3].([]any)
	for _, e := range queue {
		f, _ := e.([]any)
		if len(f) != 6 {
			return info, fmt.Errorf("unexpected queue entry %v", e)
		}
		wt := Waiter{ID: str(f[0]), Owner: str(f[4])}
		if seq, err := strconv.ParseFloat(str(f[1]), 64); err == nil && seq >= 0 {
			wt.Seq = uint64(seq)
		}
		deadline, derr := strconv.ParseInt(str(f[2]), 10, 64)
		lease, lerr := strconv.ParseInt(str(f[3]), 10, 64)
		switch {
		case str(f[5]) == "":
			problem("waiter %s has no heartbeat entry", wt.ID)
		case derr != nil || lerr != nil:
			problem("waiter %s: malformed heartbeat entry %q", wt.ID, str(f[5]))
		default:
			wt.Deadline = time.UnixMilli(deadline)
			wt.HandOffLease = time.Duration(lease) * time.Millisecond
		}
		// The scripts keep an entry while deadline >= now in ms.
		wt.Expired = wt.Deadline.IsZero() || deadline < nowus/1000
		info.Queue = append(info.Queue, wt)
	}
	if stray, _ := res[4].(int64); stray > 0 {
		problem("%d heartbeat entries of ids not in the queue", stray)
	}
	released, _ := res[5].(int64)
	info.Released = int(released)
	return info, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// pttl converts a PTTL reply: -1 (no expiry) stays -1.
func pttl(v any) time.Duration {
	ms, _ := v.(int64)
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}
