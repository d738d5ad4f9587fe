package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// MasterName is the name under which the Sentinel monitors the primary.
const MasterName = "chaos"

// Topology is a primary, one replica that replicates through a proxy (so a
// test can cut replication without touching either server), and one
// Sentinel (quorum 1) watching them, all on loopback.
type Topology struct {
	Primary   *testenv.Server
	Replica   *testenv.Server
	ReplLink  *Proxy // replica -> primary replication path
	Sentinel  *testenv.Server
	sentinels []string
}

// StartTopology starts the servers and the Sentinel and waits until the
// replica is in sync and the Sentinel knows it, so that a failover can
// promote it. Everything is stopped when the test ends.
func StartTopology(t testing.TB) *Topology {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp := &Topology{}
	tp.Primary = testenv.RedisServer(t)
	tp.ReplLink = NewProxy(t, "replication", tp.Primary.Addr)
	host, port, _ := strings.Cut(tp.ReplLink.Addr, ":")
	// repl-timeout is long so that a cut link does not make the replica
	// give up on its primary: Sentinel would then refuse to promote it.
	tp.Replica = testenv.RedisServer(t, "--replicaof", host, port, "--repl-timeout", "60")
	if err := waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		info, err := tp.Replica.Client().Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up"), err
	}); err != nil {
		t.Fatalf("chaos: replica never synced: %v", err)
	}

	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	cfg := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
		"sentinel down-after-milliseconds %[1]s 400\n"+
		"sentinel failover-timeout %[1]s 4000\n"+
		"sentinel parallel-syncs %[1]s 1\n", MasterName, tp.Primary.Port)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatalf("chaos: write sentinel.conf: %v", err)
	}
	tp.Sentinel = testenv.RedisServer(t, conf, "--sentinel")
	tp.sentinels = []string{tp.Sentinel.Addr}
	sc := redis.NewSentinelClient(&redis.Options{Addr: tp.Sentinel.Addr})
	defer sc.Close()
	if err := waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		reps, err := sc.Replicas(ctx, MasterName).Result()
		if err != nil {
			return false, err
		}
		for _, r := range reps {
			if r["port"] == fmt.Sprint(tp.Replica.Port) && !strings.Contains(r["flags"], "disconnected") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("chaos: sentinel never saw the replica: %v", err)
	}
	return tp
}

// Client returns a Sentinel-aware client that always talks to the current
// primary; it is closed when the test ends.
func (tp *Topology) Client(t testing.TB) *redis.Client {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    MasterName,
		SentinelAddrs: tp.sentinels,
		DialTimeout:   300 * time.Millisecond,
		ReadTimeout:   500 * time.Millisecond,
		WriteTimeout:  500 * time.Millisecond,
		MaxRetries:    -1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// MasterAddr asks the Sentinel which address it considers the primary.
func (tp *Topology) MasterAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: tp.Sentinel.Addr})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return "", err
	}
	return a[0] + ":" + a[1], nil
}

// WaitPromoted waits until the Sentinel names the replica as primary and the
// replica reports role:master.
func (tp *Topology) WaitPromoted(ctx context.Context) error {
	return waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		a, err := tp.MasterAddr(ctx)
		if err != nil || a != tp.Replica.Addr {
			return false, nil
		}
		info, err := tp.Replica.Client().Info(ctx, "replication").Result()
		return strings.Contains(info, "role:master"), err
	})
}

// waitFor polls cond every interval until it reports true, returns an error
// other than a transient one at the deadline, or ctx ends.
func waitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
