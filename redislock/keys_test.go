package redislock

import (
	"slices"
	"strings"
	"testing"
)

func TestHashSlotKnownValues(t *testing.T) {
	for _, c := range []struct {
		name string
		slot int
	}{
		{"123456789", 0x31C3}, // the CRC16/XMODEM check value
		{"foo", 12182},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363}, // an empty tag hashes the whole name
		{"foo{{bar}}zap", 4015},
	} {
		if got := hashSlot(c.name); got != c.slot {
			t.Errorf("hashSlot(%q) = %d, want %d", c.name, got, c.slot)
		}
	}
}

// All names of one lock share a hash slot, whatever the key contains, so that
// every script and the sharded channel work on a cluster.
func TestKeyLayoutSharesOneSlot(t *testing.T) {
	for _, key := range []string{
		"a", "order:42", "{", "}", "}x{", "{x}", "a{b}c", "{}", "é€😀", strings.Repeat("z", MaxKeyLen),
		strings.Repeat("}", MaxKeyLen),
	} {
		k := keysFor("redfence", key)
		slot := hashSlot(k.lock)
		for _, name := range k.all() {
			if !strings.HasPrefix(name, "redfence:{") && !strings.HasPrefix(name, "redfence:#{") {
				t.Errorf("key %q: name %q does not start with the prefix and a hash tag", key, name)
			}
			if hashSlot(name) != slot {
				t.Errorf("key %q: %q is in slot %d, the lock in %d", key, name, hashSlot(name), slot)
			}
		}
		tag := strings.TrimSuffix(strings.SplitN(k.lock, "{", 2)[1], "}:lock")
		if strings.ContainsAny(tag, "{}") || tag == "" {
			t.Errorf("key %q: tag %q", key, tag)
		}
	}
	// Digested keys differ from each other and from a plain key spelling a digest.
	a, b := keysFor("p", "a{b"), keysFor("p", "a{c")
	plain := keysFor("p", strings.TrimSuffix(strings.TrimPrefix(a.lock, "p:#{"), "}:lock"))
	if a.lock == b.lock || a.lock == plain.lock {
		t.Errorf("names collide: %q %q %q", a.lock, b.lock, plain.lock)
	}
	if k := keysFor("p", "x"); k.lock != "p:{x}:lock" || k.token != "p:{x}:token" || k.q != "p:{x}:q" ||
		k.w != "p:{x}:w" || k.ch != "p:{x}:ch" || k.rel != "p:{x}:rel" ||
		!slices.Equal(k.all(), []string{k.lock, k.token, k.q, k.w, k.ch, k.rel}) {
		t.Errorf("layout changed: %+v", k)
	}
}

func TestValidateKey(t *testing.T) {
	for key, wantErr := range map[string]bool{
		"":                                 true,
		"k":                                false,
		strings.Repeat("k", MaxKeyLen):     false,
		strings.Repeat("k", MaxKeyLen+1):   true,
		"\xff":                             true,
		strings.Repeat("é", MaxKeyLen/2):   false,
		strings.Repeat("é", MaxKeyLen/2+1): true,
	} {
		if err := ValidateKey(key); (err != nil) != wantErr {
			t.Errorf("ValidateKey(%d bytes) = %v", len(key), err)
		}
	}
}
