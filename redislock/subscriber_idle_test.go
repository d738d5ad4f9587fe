package redislock

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// serverPubsubConns counts the pub/sub connections a server has.
func serverPubsubConns(t *testing.T, ctx context.Context, c *redis.Client) int {
	t.Helper()
	list, err := c.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	return strings.Count(list, "\n")
}

// subsLen is how many subscribers l keeps.
func subsLen(l *Locker) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}

// contend makes l wait for key behind a holder of other until its grant
// subscription is confirmed (subscribed reports it), then hands the lock over
// and releases it.
func contend(t *testing.T, l, other *Locker, key string, subscribed func(ch string) bool) {
	t.Helper()
	holder := mustLock(t, other, key)
	res := lockAsync(l, testCtx(t), key)
	ch := l.waitChannel(l.keys(key))
	waitFor(t, 5*time.Second, "subscription to "+ch, func() bool { return subscribed(ch) })
	mustUnlock(t, holder)
	out := <-res
	if out.err != nil {
		t.Fatal(out.err)
	}
	mustUnlock(t, out.lk)
}

// A subscriber left without waiters closes its connection after the linger
// and leaves the Locker; the next wait subscribes again.
func TestIdleSubscriberRetires(t *testing.T) {
	srv := testenv.RedisServer(t)
	admin := srv.Client()
	ctx := testCtx(t)
	opt := &Options{Prefix: "rf", WaiterTimeout: 600 * time.Millisecond, RecheckInterval: 200 * time.Millisecond}
	l := newTestLocker(t, srv.Client(), opt)
	other := newTestLocker(t, srv.Client(), opt)
	subscribed := func(ch string) bool { return admin.PubSubNumSub(ctx, ch).Val()[ch] == 1 }
	linger := max(l.opt.WaiterTimeout, time.Second)
	for round := range 2 {
		contend(t, l, other, "idle", subscribed)
		if n := serverPubsubConns(t, ctx, admin); n != 1 {
			t.Fatalf("round %d: %d pub/sub connections right after a wait, want 1 (lingering)", round, n)
		}
		idleFrom := time.Now()
		waitFor(t, 3*linger, "idle subscriber retired", func() bool {
			return serverPubsubConns(t, ctx, admin) == 0 && subsLen(l) == 0
		})
		if el := time.Since(idleFrom); el < linger/2 {
			t.Fatalf("round %d: subscription closed %v after the last wait, before lingering %v", round, el, linger)
		}
	}
}

// On a real cluster, a Locker that has waited on locks in many hash slots
// keeps pub/sub connections only for the slots it waits on now.
func TestClusterIdleSubscribersClosed(t *testing.T) {
	cc := startCluster(t)
	ctx := testCtx(t)
	opt := &Options{Prefix: "rf", WaiterTimeout: 600 * time.Millisecond, RecheckInterval: 300 * time.Millisecond}
	l := newTestLocker(t, cc, opt)
	other := newTestLocker(t, cc, opt)
	subscribed := func(ch string) bool {
		owner, err := cc.MasterForKey(ctx, ch)
		return err == nil && owner.PubSubShardNumSub(ctx, ch).Val()[ch] >= 1
	}
	conns := func() int {
		var n atomic.Int64
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			n.Add(int64(serverPubsubConns(t, ctx, c)))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return int(n.Load())
	}
	slots := map[int]bool{}
	var keys []string
	for i := 0; len(keys) < 51; i++ {
		k := fmt.Sprintf("slot-%d", i)
		if s := hashSlot(l.keys(k).lock); !slots[s] {
			slots[s] = true
			keys = append(keys, k)
		}
	}
	most := 0
	for _, k := range keys[:50] {
		contend(t, l, other, k, subscribed)
		most = max(most, conns())
	}
	// One wait still going on, in yet another slot.
	holder := mustLock(t, other, keys[50])
	res := lockAsync(l, ctx, keys[50])
	waitFor(t, 5*time.Second, "last waiter subscribed", func() bool { return subscribed(l.waitChannel(l.keys(keys[50]))) })
	linger := max(l.opt.WaiterTimeout, time.Second)
	// Only the connection of the slot waited on stays.
	waitFor(t, 3*linger, "idle pub/sub connections closed", func() bool { return conns() == 1 && subsLen(l) == 1 })
	t.Logf("at most %d pub/sub connections over 50 sequential waits within one linger (%v)", most, linger)
	mustUnlock(t, holder)
	out := <-res
	if out.err != nil {
		t.Fatal(out.err)
	}
	mustUnlock(t, out.lk)
}

// Subscribers of hash slots whose locks were always free never connect;
// they are dropped as new slots come, so that uncontended locks spread over
// many slots do not accumulate them either.
func TestUnusedSubscribersPruned(t *testing.T) {
	l := newTestLocker(t, testenv.Redis(t), nil)
	l.cluster = true // subscribers per slot; nothing here talks to Redis
	slots := map[int]bool{}
	for i := range 4000 {
		k := l.keys(fmt.Sprintf("free-%d", i))
		slots[hashSlot(k.ch)] = true
		s := l.subscriberFor(k)
		w := s.register(fmt.Sprintf("id-%d", i), k.ch)
		s.unregister(w)
		if n := subsLen(l); n > 128 {
			t.Fatalf("%d subscribers kept after %d uncontended locks in %d slots", n, i+1, len(slots))
		}
	}
}
