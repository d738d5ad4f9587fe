package main

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A -prefix that is not the Lockers' makes a held lock look free. When the
// lock has no state under the prefix, inspect says whether the prefix holds
// any key at all, and which prefixes hold the key's, found with SCAN over a
// bounded part of the keyspace so that a large database costs a bounded time.

// Bounds of each SCAN: keys asked per call, and calls.
const (
	scanCount = 1000
	scanCalls = 100
)

// maxOtherPrefixes bounds the prefixes listed.
const maxOtherPrefixes = 10

// prefixReport is what the scans found.
type prefixReport struct {
	// empty: the whole keyspace was scanned and no key starts with the
	// prefix.
	empty bool
	// others are the prefixes, other than the one given, under which the
	// key has Redis names, sorted; at most maxOtherPrefixes.
	others []string
}

// scanPrefixes looks for keys under prefix and for the Redis names of key
// (whose names start with base, "<prefix>:{<key>}:") under other prefixes.
func scanPrefixes(ctx context.Context, rdb redis.UniversalClient, prefix, base string) (prefixReport, error) {
	var r prefixReport
	found, complete, err := scan(ctx, rdb, globEscape(prefix+":")+"*", func(string) bool { return true })
	if err != nil {
		return r, err
	}
	r.empty = complete && found == 0
	tag := base[len(prefix):] // ":{<key>}:"
	seen := map[string]bool{}
	_, _, err = scan(ctx, rdb, "*"+globEscape(tag)+"*", func(name string) bool {
		if i := strings.LastIndex(name, tag); i >= 0 && name[:i] != prefix && !seen[name[:i]] {
			seen[name[:i]] = true
			r.others = append(r.others, name[:i])
		}
		return len(r.others) < maxOtherPrefixes
	})
	slices.Sort(r.others)
	return r, err
}

// scan runs SCAN with pattern until the keyspace is covered, the bound is
// reached or each returns false; it returns how many names it gave each and
// whether the whole keyspace was scanned.
func scan(ctx context.Context, rdb redis.UniversalClient, pattern string, each func(string) bool) (found int, complete bool, err error) {
	var cursor uint64
	for range scanCalls {
		var names []string
		names, cursor, err = rdb.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return found, false, err
		}
		for _, n := range names {
			found++
			if !each(n) {
				return found, false, nil
			}
		}
		if cursor == 0 {
			return found, true, nil
		}
	}
	return found, false, nil
}

// globEscape escapes the characters SCAN's MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
