package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// startCluster starts a three-primary Redis Cluster on loopback ports and
// returns a cluster client for it.
func startCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	ctx := testCtx(t)
	var nodes []*testenv.Server
	var buses []int
	for range 3 {
		bus := testenv.FreePort(t)
		s := testenv.RedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "2000")
		nodes, buses = append(nodes, s), append(buses, bus)
	}
	const slots = 16384
	for i, s := range nodes {
		c := s.Client()
		lo, hi := i*slots/3, (i+1)*slots/3-1
		if err := c.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("ADDSLOTSRANGE: %v", err)
		}
		if i > 0 {
			if err := nodes[0].Client().Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.Port, buses[i]).Err(); err != nil {
				t.Fatalf("CLUSTER MEET: %v", err)
			}
		}
	}
	waitFor(t, 20*time.Second, "cluster state ok on every node", func() bool {
		for _, s := range nodes {
			info, err := s.Client().ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				return false
			}
		}
		return true
	})
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	waitFor(t, 10*time.Second, "cluster client ready", func() bool {
		return cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }) == nil
	})
	return cc
}

// On a real cluster: slots agree with Redis, hand-offs travel over sharded
// pub/sub, locks in many slots are renewed and released, and a free lock
// leaves only its token key.
func TestCluster(t *testing.T) {
	cc := startCluster(t)
	ctx := testCtx(t)
	l := newTestLocker(t, cc, &Options{Prefix: "rf", LeaseTTL: 600 * time.Millisecond,
		WaiterTimeout: 600 * time.Millisecond, RecheckInterval: 300 * time.Millisecond})
	if l.pubcmd != "SPUBLISH" {
		t.Fatalf("cluster client publishes with %s", l.pubcmd)
	}

	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("acct-%d", i)
		k := l.keys(keys[i])
		want, err := cc.ClusterKeySlot(ctx, k.lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := hashSlot(k.lock); int64(got) != want {
			t.Fatalf("hashSlot(%q) = %d, Redis says %d", k.lock, got, want)
		}
	}

	// Hold locks in many slots across several leases: batched renewal works.
	var held []*Lock
	for _, k := range keys {
		held = append(held, mustLock(t, l, k))
	}
	time.Sleep(3 * l.opt.LeaseTTL)
	for _, lk := range held {
		if lk.Err() != nil {
			t.Fatalf("%s lost while renewed: %v", lk.Key(), lk.Err())
		}
	}

	// Hand-offs to waiters in another Locker arrive over sharded pub/sub:
	// the chain is done before a single re-check of a slow waiter.
	slow := newTestLocker(t, cc, &Options{Prefix: "rf", LeaseTTL: time.Minute, WaiterTimeout: 30 * time.Second,
		RecheckInterval: 10 * time.Second})
	var wg sync.WaitGroup
	for _, k := range keys[:4] {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lk, err := slow.Lock(ctx, k)
				if err != nil {
					t.Error(err)
					return
				}
				mustUnlock(t, lk)
			}()
		}
	}
	for _, k := range keys[:4] {
		waitFor(t, 5*time.Second, "waiters queued on "+k, func() bool {
			return cc.ZCard(ctx, l.keys(k).q).Val() == 3
		})
		ch := slow.waitChannel(l.keys(k))
		owner, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		// Queued before subscribed: the subscription follows the enqueue.
		waitFor(t, 5*time.Second, "sharded subscription to "+ch, func() bool {
			return owner.PubSubShardNumSub(ctx, ch).Val()[ch] >= 1
		})
		if n := owner.PubSubShardNumSub(ctx, ch).Val()[ch]; n != 1 {
			t.Fatalf("%d sharded subscriptions to %s for 3 waiters of one Locker, want 1", n, ch)
		}
	}
	start := time.Now()
	for _, lk := range held {
		mustUnlock(t, lk)
	}
	wg.Wait()
	if el := time.Since(start); el > slow.opt.RecheckInterval/2 {
		t.Fatalf("hand-offs took %v: not delivered by sharded pub/sub", el)
	}
	for _, k := range keys {
		kk := l.keys(k)
		if n := cc.Exists(ctx, kk.lock).Val() + cc.Exists(ctx, kk.q).Val() + cc.Exists(ctx, kk.w).Val(); n != 0 {
			t.Fatalf("%s: %d keys besides the token left", k, n)
		}
		if cc.Exists(ctx, kk.token).Val() != 1 {
			t.Fatalf("%s: token key missing", k)
		}
	}
}
