package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/redislock"
)

// prefixEnv is a Redis of the test's own, so that SCAN covers a keyspace the
// test knows, with the test's database for the fence table.
type prefixEnv struct {
	*env
	srv *testenv.Server
}

func newPrefixEnv(t *testing.T) prefixEnv {
	return prefixEnv{env: newEnv(t), srv: testenv.RedisServer(t)}
}

// hold takes key's lock under prefix on the test's Redis until the test ends.
func (p prefixEnv) hold(prefix, key string) {
	p.t.Helper()
	l := redislock.New(p.srv.Client(), &redislock.Options{Prefix: prefix})
	p.t.Cleanup(func() { _ = l.Close() })
	lk, err := l.Lock(testCtx(p.t), key)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = lk.Unlock(context.Background()) })
}

func (p prefixEnv) inspect(args ...string) result {
	p.t.Helper()
	r := runCLI(p.t, append(args, "-redis-addr", p.srv.Addr, "-mysql-dsn", p.dsn)...)
	if r.code != exitOK {
		p.t.Fatalf("inspect %v: %v", args, r)
	}
	return r
}

// inspect with a -prefix the Lockers do not use says that no key at all is
// under it, and names the prefixes that hold the key, also for a key and
// prefixes that SCAN's MATCH would read as patterns.
func TestInspectWrongPrefix(t *testing.T) {
	p := newPrefixEnv(t)
	const key = "sku*[4]?"
	p.hold("orders", key)
	p.hold("shop?v2", key)
	p.hold("orders", "other-key")

	var got inspectJSON
	decode(t, p.inspect("inspect", "-json", "-prefix", "order", key), &got)
	if got.Holder != nil || !got.PrefixEmpty || !slices.Equal(got.OtherPrefixes, []string{"orders", "shop?v2"}) {
		t.Fatalf("wrong prefix: holder %v, prefix_empty %v, other_prefixes %q; want none, true, [orders shop?v2]",
			got.Holder, got.PrefixEmpty, got.OtherPrefixes)
	}
	text := p.inspect("inspect", "-prefix", "order", key).stdout
	for _, want := range []string{`no Redis key at all starts with "order:"`, `under prefix "orders", "shop?v2": pass -prefix "orders"`} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}

	// A prefix that holds other keys, where this key is free: not empty,
	// and the prefixes that hold this key are named.
	decode(t, p.inspect("inspect", "-json", "-prefix", "orders", "free-key"), &got)
	if got.PrefixEmpty || len(got.OtherPrefixes) != 0 {
		t.Fatalf("free key under a used prefix: prefix_empty %v, other_prefixes %q", got.PrefixEmpty, got.OtherPrefixes)
	}

	// The right prefix: the holder, and nothing to say about prefixes.
	decode(t, p.inspect("inspect", "-json", "-prefix", "orders", key), &got)
	if got.Holder == nil || got.PrefixEmpty || got.OtherPrefixes == nil || len(got.OtherPrefixes) != 0 {
		t.Fatalf("right prefix: holder %v, prefix_empty %v, other_prefixes %q", got.Holder, got.PrefixEmpty, got.OtherPrefixes)
	}
	if text := p.inspect("inspect", "-prefix", "orders", key).stdout; strings.Contains(text, "prefix  ") {
		t.Errorf("right prefix, yet a prefix line:\n%s", text)
	}
}
