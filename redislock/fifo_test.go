package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// Waiters on separate Lockers, each with its own client and connections, get
// the lock in the order their enqueue reached Redis; the releaser re-locking
// at once goes to the back; tokens grow along the way.
func TestFIFOAcrossLockers(t *testing.T) {
	const n = 8
	prefix := testenv.Prefix(t)
	opt := &Options{Prefix: prefix}
	holderRdb := testenv.Redis(t)
	holder := newTestLocker(t, holderRdb, opt)
	ctx := testCtx(t)
	first := mustLock(t, holder, "fifo")

	var mu sync.Mutex
	var order []string
	var tokens []uint64
	record := func(name string, lk *Lock) {
		mu.Lock()
		order = append(order, name)
		tokens = append(tokens, lk.Token())
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range n {
		l := newTestLocker(t, testenv.Redis(t), opt)
		name := fmt.Sprintf("w%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := l.Lock(ctx, "fifo")
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			record(name, lk)
			mustUnlock(t, lk)
		}()
		// The next waiter starts only once this one is in the queue, so the
		// enqueue order is known.
		waitFor(t, 5*time.Second, name+" queued", func() bool { return len(queue(t, holderRdb, holder, "fifo")) == i+1 })
	}
	// Nobody may barge in while others wait: not a newcomer with TryLock...
	if _, err := holder.TryLock(ctx, "fifo"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock jumped the queue: %v", err)
	}
	// ...nor the releaser locking again right after its Unlock.
	mustUnlock(t, first)
	again := mustLock(t, holder, "fifo")
	record("holder-again", again)
	mustUnlock(t, again)
	wg.Wait()

	want := []string{}
	for i := range n {
		want = append(want, fmt.Sprintf("w%d", i))
	}
	want = append(want, "holder-again")
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Fatalf("grant order %v, want %v", order, want)
	}
	prev := first.Token()
	for i, tok := range tokens {
		if tok <= prev {
			t.Fatalf("token %d of %s = %d, not above %d", i, order[i], tok, prev)
		}
		prev = tok
	}
}

// A free lock with a live waiter queued (its holder crashed) is not given to a
// newcomer: TryLock fails, and hands the lock to the head on its way.
func TestTryLockDoesNotBargeFreeLockWithQueue(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{WaiterTimeout: 10 * time.Second})
	ctx := testCtx(t)
	holder := mustLock(t, l, "barge")
	l.renew.remove(holder) // the holder "crashes": no renewal, no unlock
	got := make(chan *Lock, 2)
	go func() {
		lk, err := l.Lock(ctx, "barge")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, "barge")) == 1 })
	rdb.Del(ctx, holder.k.lock) // the lease ends long before the waiter's re-check
	if _, err := l.TryLock(ctx, "barge"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock took a lock someone waits for: %v", err)
	}
	select {
	case lk := <-got:
		if lk.Token() <= holder.Token() {
			t.Fatalf("token %d not above %d", lk.Token(), holder.Token())
		}
		mustUnlock(t, lk)
	case <-time.After(l.opt.RecheckInterval / 2):
		t.Fatal("the head waiter was not woken by the hand-off TryLock made")
	}
}

// pubsubConns counts the connections of clients named name that are in
// pub/sub mode.
func pubsubConns(t testing.TB, rdb *redis.Client, name string) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && !strings.Contains(line, " sub=0 psub=0 ssub=0 ") {
			n++
		}
	}
	return n
}

// Many goroutines waiting on several keys share one subscription connection,
// and hand-offs reach them by message: with re-checks far apart, the whole
// chain completes long before a single re-check would fire.
func TestHandOffOverOneSharedSubscription(t *testing.T) {
	name := "rftest-" + testenv.RandomHex(4)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), ClientName: name})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 2 * time.Minute, WaiterTimeout: 60 * time.Second, RecheckInterval: 30 * time.Second})
	ctx := testCtx(t)
	keys := []string{"a", "b", "c", "d"}
	const perKey = 6
	start := time.Now()
	var holders []*Lock
	for _, k := range keys {
		holders = append(holders, mustLock(t, l, k))
	}
	var wg sync.WaitGroup
	tokens := make(map[string][]uint64)
	var mu sync.Mutex
	for _, k := range keys {
		for range perKey {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lk, err := l.Lock(ctx, k)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				tokens[k] = append(tokens[k], lk.Token())
				mu.Unlock()
				mustUnlock(t, lk)
			}()
		}
	}
	for _, k := range keys {
		waitFor(t, 5*time.Second, "waiters queued on "+k, func() bool { return len(queue(t, admin, l, k)) == perKey })
	}
	for _, k := range keys {
		ch := l.waitChannel(l.keys(k))
		waitFor(t, 5*time.Second, "subscription to "+ch, func() bool { return admin.PubSubNumSub(ctx, ch).Val()[ch] == 1 })
	}
	if got := pubsubConns(t, admin, name); got != 1 {
		t.Fatalf("%d pub/sub connections for %d waiters, want 1", got, len(keys)*perKey)
	}
	for _, h := range holders {
		mustUnlock(t, h)
	}
	wg.Wait()
	if el := time.Since(start); el > l.opt.RecheckInterval/2 {
		t.Fatalf("hand-off chain took %v: waiters waited for re-checks instead of messages", el)
	}
	for i, k := range keys {
		prev := holders[i].Token()
		for _, tok := range tokens[k] {
			if tok <= prev {
				t.Fatalf("key %s: token %d after %d", k, tok, prev)
			}
			prev = tok
		}
	}
}

// A grant whose message is lost is found by the waiter's next re-check.
func TestLostGrantMessageFoundByRecheck(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, &Options{WaiterTimeout: 2 * time.Second, RecheckInterval: 200 * time.Millisecond})
	ctx := testCtx(t)
	holder := mustLock(t, l, "lost-push")
	got := make(chan *Lock, 2)
	go func() {
		lk, err := l.Lock(ctx, "lost-push")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, rdb, l, "lost-push")) == 1 })
	l.renew.remove(holder)
	// Release publishing to a channel nobody listens to: the push is lost.
	k := holder.k
	k.ch += ":nobody"
	if n, err := scriptUnlock.Run(ctx, rdb, k.all(), holder.id, 60000, "PUBLISH").Int64(); err != nil || n != 1 {
		t.Fatalf("unlock: %d %v", n, err)
	}
	select {
	case lk := <-got:
		if lk.Token() <= holder.Token() {
			t.Fatalf("token %d not above %d", lk.Token(), holder.Token())
		}
		mustUnlock(t, lk)
	case <-time.After(10 * l.opt.RecheckInterval):
		t.Fatal("waiter did not find its grant by re-checking")
	}
}

// A hand-off is announced on the channel of the Locker whose waiter it names
// only, so that it wakes one process however many wait on the key.
func TestHandOffWakesOnlyTheWaitersLocker(t *testing.T) {
	prefix := testenv.Prefix(t)
	opt := &Options{Prefix: prefix}
	admin := testenv.Redis(t)
	holder := newTestLocker(t, admin, opt)
	a := newTestLocker(t, testenv.Redis(t), opt)
	b := newTestLocker(t, testenv.Redis(t), opt)
	ctx := testCtx(t)
	k := holder.keys("one-wake")
	obs := admin.PSubscribe(ctx, k.ch+"*")
	defer obs.Close()
	if _, err := obs.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	first := mustLock(t, holder, "one-wake")
	var wg sync.WaitGroup
	for i, l := range []*Locker{a, b, a} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := l.Lock(ctx, "one-wake")
			if err != nil {
				t.Error(err)
				return
			}
			mustUnlock(t, lk)
		}()
		waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, admin, holder, "one-wake")) == i+1 })
	}
	for _, l := range []*Locker{a, b} {
		ch := l.waitChannel(k)
		waitFor(t, 5*time.Second, "subscription to "+ch, func() bool { return admin.PubSubNumSub(ctx, ch).Val()[ch] == 1 })
	}
	mustUnlock(t, first)
	wg.Wait()
	seen := map[*Locker]int{}
	for range 3 {
		m, err := obs.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var to *Locker
		for _, l := range []*Locker{a, b} {
			if strings.HasPrefix(m.Payload, l.idBase+".") {
				to = l
			}
		}
		if to == nil || m.Channel != to.waitChannel(k) {
			t.Fatalf("hand-off %q announced on %q, not on the channel of the Locker it names", m.Payload, m.Channel)
		}
		seen[to]++
	}
	if seen[a] != 2 || seen[b] != 1 {
		t.Fatalf("hand-offs announced to a %d and b %d times, want 2 and 1", seen[a], seen[b])
	}
}
