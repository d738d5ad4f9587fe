package redislock

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key accepted, in bytes. Keys also name the fence
// row that protects the resource in the database, whose column holds 191
// bytes.
const MaxKeyLen = 191

// ValidateKey reports whether key is acceptable to [Locker.Lock]: 1 to
// [MaxKeyLen] bytes of valid UTF-8. The error wraps [ErrInvalidKey].
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	return nil
}

// lockKeys are the Redis names of one lock, all in one hash slot.
type lockKeys struct {
	lock, token, q, w, ch, rel string
	list                       []string // the six above, as scripts take them; read-only
}

func (k lockKeys) all() []string { return k.list }

// base returns the common start of the Redis names of key: the key itself
// as hash tag, "<prefix>:{<key>}:". A key containing a brace would end the tag
// early (a key starting with '}' would even give an empty tag and scatter the
// names over slots), so such keys are digested instead, "<prefix>:#{<hex>}:",
// where the '#' keeps them apart from any plain key.
func base(prefix, key string) string {
	if !strings.ContainsAny(key, "{}") {
		return prefix + ":{" + key + "}:"
	}
	sum := sha256.Sum256([]byte(key))
	return prefix + ":#{" + hex.EncodeToString(sum[:16]) + "}:"
}

func keysFor(prefix, key string) lockKeys {
	b := base(prefix, key)
	// One allocation for all six names: they are slices of one string.
	all := b + "lock" + b + "token" + b + "q" + b + "w" + b + "ch" + b + "rel"
	n := len(b)
	var k lockKeys
	k.lock, all = all[:n+4], all[n+4:]
	k.token, all = all[:n+5], all[n+5:]
	k.q, all = all[:n+1], all[n+1:]
	k.w, all = all[:n+1], all[n+1:]
	k.ch, k.rel = all[:n+2], all[n+2:]
	k.list = []string{k.lock, k.token, k.q, k.w, k.ch, k.rel}
	return k
}

func validatePrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return errors.New("Prefix must not contain '{' or '}'")
	}
	if !utf8.ValidString(p) {
		return errors.New("Prefix must be valid UTF-8")
	}
	return nil
}

// hashSlot is the Redis Cluster slot of a name: CRC16 (XMODEM) of its hash tag
// modulo 16384.
func hashSlot(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	return int(crc16(name) % 16384)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// KeyNames are the Redis names that hold one lock's state, all in one hash
// slot (see the package documentation for what each holds).
type KeyNames struct {
	Lock    string // the holder, its token and acquisitions; expires with the lease
	Token   string // the last token minted; outlives the lock (Options.TokenTTL)
	Queue   string // the waiters in FIFO order
	Waiters string // the waiters' heartbeats
	// Channel starts the names of the channels where hand-offs are
	// announced: a Locker's waiters listen on Channel + ":" + that Locker's
	// id (the part of their acquisition ids before the first '.'), so that a
	// hand-off wakes only the process whose waiter it names.
	Channel string
	// Released records recent releases, so that a retried Unlock of one is
	// answered as applied; it expires a lease after the last release.
	Released string
}

// KeyNamesFor returns the Redis names a Locker with Options.Prefix prefix
// ("" for the default) uses for key, for inspecting a lock's state from
// outside. Deleting them (Token included) is what a failover to a replica that
// missed them does; the tokens minted afterwards are still larger. The error
// wraps [ErrInvalidKey] or [ErrInvalidOptions].
func KeyNamesFor(prefix, key string) (KeyNames, error) {
	if prefix == "" {
		prefix = defaultPrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return KeyNames{}, fmt.Errorf("%w: %s", ErrInvalidOptions, err.Error())
	}
	if err := ValidateKey(key); err != nil {
		return KeyNames{}, err
	}
	k := keysFor(prefix, key)
	return KeyNames{Lock: k.lock, Token: k.token, Queue: k.q, Waiters: k.w, Channel: k.ch, Released: k.rel}, nil
}
