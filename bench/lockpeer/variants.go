package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/redislock"
)

// contender is one lock library set up for a contention run: its goroutines
// share nClients clients, as callers in separate processes would.
type contender interface {
	// acquire takes the lock named key for goroutine g, waiting while ctx
	// lasts. seq is the caller's queue sequence in Redis when it had to queue
	// (0 otherwise or when the library has none); order sorts grants of one
	// key (0: sort by the time acquire returned).
	acquire(ctx context.Context, g int, key string) (release func(context.Context) error, order uint64, seq int64, err error)
	close()
}

// variant names a contender and builds it on a run's clients.
type variant struct {
	name  string
	about string // the settings, for the header
	build func(prefix string, clients []*redis.Client) contender
}

func redfenceVariant() variant {
	return variant{
		name:  "redislock",
		about: "redislock (this repository), default Options, Lock (queued, woken by pub/sub)",
		build: func(prefix string, clients []*redis.Client) contender {
			return newRedfence(prefix, clients, false)
		},
	}
}

// redfenceFixedVariant releases with a ctx that cannot end, whose request
// redislock sends from the calling goroutine rather than from one of its own
// (what a release ctx that can end costs).
func redfenceFixedVariant() variant {
	return variant{
		name:  "redislock-bg",
		about: "redislock as above, Unlock with context.Background() (the request sent from the caller's goroutine)",
		build: func(prefix string, clients []*redis.Client) contender {
			return newRedfence(prefix, clients, true)
		},
	}
}

func newRedfence(prefix string, clients []*redis.Client, background bool) *redfence {
	ls := make([]*redislock.Locker, len(clients))
	for i, c := range clients {
		ls[i] = redislock.New(c, &redislock.Options{Prefix: prefix})
	}
	return &redfence{ls: ls, background: background}
}

type redfence struct {
	ls         []*redislock.Locker
	background bool
}

func (r *redfence) acquire(ctx context.Context, g int, key string) (func(context.Context) error, uint64, int64, error) {
	at := &attempt{}
	lk, err := r.ls[g%len(r.ls)].Lock(context.WithValue(ctx, attemptKey{}, at), key)
	if err != nil {
		return nil, 0, 0, err
	}
	release := lk.Unlock
	if r.background {
		release = func(context.Context) error { return lk.Unlock(context.Background()) }
	}
	return release, lk.Token(), at.seq.Load(), nil
}

func (r *redfence) close() {
	for _, l := range r.ls {
		_ = l.Close()
	}
}

// bsmVariant parses one -bsm entry: "linear:INTERVAL" for
// LinearBackoff(INTERVAL), or "exp:MIN:MAX" for ExponentialBackoff(MIN, MAX).
func bsmVariant(spec string, ttl time.Duration) (variant, error) {
	parts := strings.Split(spec, ":")
	dur := func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("bad -bsm entry %q: %q is not a duration", spec, s)
		}
		return d, nil
	}
	var strategy func() bsm.RetryStrategy
	var about string
	switch {
	case parts[0] == "linear" && len(parts) == 2:
		d, err := dur(parts[1])
		if err != nil || d == 0 {
			return variant{}, fmt.Errorf("bad -bsm entry %q: linear needs an interval above 0", spec)
		}
		strategy = func() bsm.RetryStrategy { return bsm.LinearBackoff(d) }
		about = fmt.Sprintf("LinearBackoff(%v)", d)
	case parts[0] == "exp" && len(parts) == 3:
		lo, err := dur(parts[1])
		if err != nil {
			return variant{}, err
		}
		hi, err := dur(parts[2])
		if err != nil {
			return variant{}, err
		}
		// The strategy counts its retries, so every Obtain gets its own.
		strategy = func() bsm.RetryStrategy { return bsm.ExponentialBackoff(lo, hi) }
		about = fmt.Sprintf("ExponentialBackoff(%v, %v)", lo, hi)
	default:
		return variant{}, fmt.Errorf("bad -bsm entry %q: want linear:INTERVAL or exp:MIN:MAX", spec)
	}
	return variant{
		name:  "bsm-" + spec,
		about: fmt.Sprintf("github.com/bsm/redislock, Obtain with %s, TTL %v", about, ttl),
		build: func(prefix string, clients []*redis.Client) contender {
			cs := make([]*bsm.Client, len(clients))
			for i, c := range clients {
				cs[i] = bsm.New(c)
			}
			return &bsmLocks{prefix: prefix, clients: cs, ttl: ttl, strategy: strategy}
		},
	}, nil
}

type bsmLocks struct {
	prefix   string
	clients  []*bsm.Client
	ttl      time.Duration
	strategy func() bsm.RetryStrategy
}

func (b *bsmLocks) acquire(ctx context.Context, g int, key string) (func(context.Context) error, uint64, int64, error) {
	lk, err := b.clients[g%len(b.clients)].Obtain(ctx, b.prefix+":bsm:"+key, b.ttl,
		&bsm.Options{RetryStrategy: b.strategy()})
	if err != nil {
		return nil, 0, 0, err
	}
	return lk.Release, 0, 0, nil
}

func (b *bsmLocks) close() {}

// variantFilter reports whether name is selected by a comma-separated list
// of names ("" selects all).
func variantFilter(list, name string) bool {
	if list == "" {
		return true
	}
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == name {
			return true
		}
	}
	return false
}

// parseCounts parses a comma-separated list of goroutine counts.
func parseCounts(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad goroutine count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
