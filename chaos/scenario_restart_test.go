package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// Scenario 7: Redis restarted without persistence under load, three times.
// Every lock, queue and token counter vanishes; holders in flight lose their
// locks while their transactions may still be open. Tokens committed at the
// database must still increase strictly (the TIME floor), nothing may be
// oversold, and buying must resume after each restart.
func TestScenarioRedisRestart(t *testing.T) {
	e := newEnv(t, "redis-restart", 1500)
	srv := testenv.RedisServer(t)
	ctx := ctxT(t, 120*time.Second)
	var cs []*client
	for i := 0; i < 3; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 300 * time.Millisecond,
			ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		cs = append(cs, e.newClient(rdb, e.db, fastLocks))
	}
	lctx, stop := context.WithCancel(ctx)
	// Holders stay 30ms in fn, so restarts catch some of them mid-transaction.
	waitLoad := e.loadHolding(lctx, 15*time.Millisecond, 30*time.Millisecond, cs...)
	defer func() { stop(); waitLoad() }()

	for round := 0; round < 3; round++ {
		time.Sleep(800 * time.Millisecond) // a window of normal buying
		srv.Restart()
		restarted := e.h.Since()
		op, err := e.awaitProgress(ctx, restarted, 10*time.Second)
		mustNoErr(t, err, "buying after the restart")
		t.Logf("restart %d: first buy invoked after the restart returned %s (token %d) %v after the restart",
			round, op.Outcome, op.Token, (op.Return - restarted).Round(time.Millisecond))
	}
	time.Sleep(800 * time.Millisecond)
	stop()
	waitLoad()
	e.finish()
}
