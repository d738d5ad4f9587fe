package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// KeyNamesFor names the keys a lock really uses: the lock and token keys while
// held, the queue and heartbeats while someone waits, the released record
// after an Unlock, for plain keys and for
// keys whose braces force the digested layout.
func TestKeyNamesAreTheKeysInUse(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	l := newTestLocker(t, rdb, &Options{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{"plain", "}odd{key"} {
		names, err := KeyNamesFor(prefix, key)
		if err != nil {
			t.Fatalf("KeyNamesFor(%q): %v", key, err)
		}
		lk, err := l.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		waitCtx, stopWaiting := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			_, err := l.Lock(waitCtx, key)
			waited <- err
		}()
		waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return rdb.ZCard(ctx, names.Queue).Val() == 1 })
		if n := rdb.Exists(ctx, names.Lock, names.Token, names.Waiters).Val(); n != 3 {
			t.Errorf("%q: %d of lock, token and waiters keys exist, want 3 (%+v)", key, n, names)
		}
		stopWaiting()
		if err := <-waited; !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("waiter: %v", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := rdb.Exists(ctx, names.Token, names.Released).Val(); n != 2 {
			t.Errorf("%q: %d of token and released keys exist after Unlock, want 2 (%+v)", key, n, names)
		}
		if names.Channel == "" || hashSlot(names.Channel) != hashSlot(names.Lock) {
			t.Errorf("%q: channel %q not in the lock's slot", key, names.Channel)
		}
	}
	if _, err := KeyNamesFor(prefix, ""); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("empty key: %v, want ErrInvalidKey", err)
	}
	if _, err := KeyNamesFor("a{b", "k"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("prefix with a brace: %v, want ErrInvalidOptions", err)
	}
	if d, err := KeyNamesFor("", "k"); err != nil || d.Lock != keysFor(defaultPrefix, "k").lock {
		t.Errorf("default prefix: %+v, %v", d, err)
	}
}
