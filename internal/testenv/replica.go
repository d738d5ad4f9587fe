package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// WaitReplicaSync waits until replica is connected to primary, has applied
// every write primary had made when the call started, and is seen online by
// primary and acknowledging writes (so that WAIT counts it). It fails the test
// after 10 s.
func WaitReplicaSync(t testing.TB, primary, replica *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	target := int64(-1)
	for {
		if target < 0 {
			if info, err := primary.Info(ctx, "replication").Result(); err == nil {
				if v, ok := infoField(info, "master_repl_offset"); ok {
					target, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
		if info, err := replica.Info(ctx, "replication").Result(); err == nil && target >= 0 {
			link, _ := infoField(info, "master_link_status")
			off, _ := infoField(info, "slave_repl_offset")
			n, _ := strconv.ParseInt(off, 10, 64)
			// The primary counts a replica for WAIT only once it sees it
			// online, which after a diskless sync waits for its first ACK.
			pinfo, _ := primary.Info(ctx, "replication").Result()
			if link == "up" && n >= target && strings.Contains(pinfo, ",state=online,") && acks(ctx, primary) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: replica did not catch up with the primary within 10s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// acks reports whether a replica acknowledges a write made now: PUBLISH is
// replicated without touching the keyspace, and WAIT asks for the ACK.
func acks(ctx context.Context, primary *redis.Client) bool {
	pipe := primary.Pipeline()
	pipe.Publish(ctx, "testenv:replica-sync", "1")
	wait := pipe.Do(ctx, "WAIT", 1, 100)
	if _, err := pipe.Exec(ctx); err != nil {
		return false
	}
	n, _ := wait.Int64()
	return n >= 1
}

func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
