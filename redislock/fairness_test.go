package redislock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// addDeadWaiters writes n queue entries whose heartbeats ended long ago, in
// the scripts' layout, ahead of any entry queued later.
func addDeadWaiters(t *testing.T, rdb *redis.Client, names KeyNames, n int) {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 1; i <= n; i++ {
		id := "dead." + strconv.Itoa(i)
		pipe.ZAdd(ctx, names.Queue, redis.Z{Score: float64(i), Member: id})
		pipe.HSet(ctx, names.Waiters, id, "1000:5000:"+id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// However many dead entries head the queue, a caller from another Locker
// does not get a free lock while a live waiter is queued behind them: the
// live waiter is served first.
func TestDeadEntriesDoNotLetCallersPassLiveWaiter(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	ctx := testCtx(t)

	t.Run("queued entry", func(t *testing.T) {
		names, _ := KeyNamesFor(prefix, "dead-head")
		addDeadWaiters(t, rdb, names, 3000)
		deadline := time.Now().Add(time.Minute).UnixMilli()
		rdb.ZAdd(ctx, names.Queue, redis.Z{Score: 1e6, Member: "live.1"})
		rdb.HSet(ctx, names.Waiters, "live.1", strconv.FormatInt(deadline, 10)+":60000:live")
		barger := newTestLocker(t, rdb, &Options{Prefix: prefix})
		for i := range 5 {
			if lk, err := barger.TryLock(ctx, "dead-head"); !errors.Is(err, ErrNotAcquired) {
				if lk != nil {
					mustUnlock(t, lk)
				}
				t.Fatalf("TryLock %d passed the live waiter: %v", i, err)
			}
		}
		if v := rdb.Get(ctx, names.Lock).Val(); v == "" || holderIDs(v) != "live.1" {
			t.Fatalf("lock = %q, want it handed to live.1 once the dead entries are gone", v)
		}
		if n := rdb.ZCard(ctx, names.Queue).Val(); n != 0 {
			t.Fatalf("%d entries left in the queue", n)
		}
	})

	t.Run("waiting Lock", func(t *testing.T) {
		names, _ := KeyNamesFor(prefix, "dead-head-2")
		addDeadWaiters(t, rdb, names, 4000)
		// A holder from elsewhere, whose lease will end without an unlock.
		rdb.Set(ctx, names.Lock, "1|gone.1|gone", time.Minute)
		l := newTestLocker(t, rdb, &Options{Prefix: prefix, WaiterTimeout: 20 * time.Second})
		first := lockAsync(l, ctx, "dead-head-2")
		waitFor(t, 5*time.Second, "live waiter queued", func() bool {
			last := rdb.ZRange(ctx, names.Queue, -1, -1).Val()
			return len(last) == 1 && last[0] != "dead.4000"
		})
		rdb.Del(ctx, names.Lock) // the holder's lease ends
		barger := newTestLocker(t, rdb, &Options{Prefix: prefix})
		second := lockAsync(barger, ctx, "dead-head-2")
		var lk *Lock
		select {
		case o := <-first:
			if o.err != nil {
				t.Fatal(o.err)
			}
			lk = o.lk
		case o := <-second:
			if o.lk != nil {
				mustUnlock(t, o.lk)
			}
			t.Fatalf("a later caller got the lock before the live waiter: %v", o.err)
		}
		select {
		case o := <-second:
			t.Fatalf("second caller got %v, %v while the first holds the lock", o.lk, o.err)
		default:
		}
		mustUnlock(t, lk)
		o := <-second
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.lk.Token() <= lk.Token() {
			t.Fatalf("token %d not above %d", o.lk.Token(), lk.Token())
		}
		mustUnlock(t, o.lk)
	})
}

// holderIDs returns the acquisition ids field of a lock value.
func holderIDs(v string) string {
	if f := strings.SplitN(v, "|", 3); len(f) == 3 {
		return f[1]
	}
	return ""
}

// Lock, not only TryLock, from another Locker does not take a lock that is
// free because its holder's lease ran out while a live waiter heads the
// queue: the head gets it, and the new caller queues behind it.
func TestLockFromNewLockerWaitsBehindLiveHead(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	ctx := testCtx(t)
	// Long re-check intervals: the head must not be the one who notices.
	l := newTestLocker(t, rdb, &Options{Prefix: prefix, WaiterTimeout: 30 * time.Second})
	names, _ := KeyNamesFor(prefix, "head")
	rdb.Set(ctx, names.Lock, "1|gone.1|gone", time.Minute)
	head := lockAsync(l, ctx, "head")
	waitFor(t, 5*time.Second, "head queued", func() bool { return rdb.ZCard(ctx, names.Queue).Val() == 1 })
	headID := rdb.ZRange(ctx, names.Queue, 0, 0).Val()[0]
	rdb.Del(ctx, names.Lock)

	late := newTestLocker(t, rdb, &Options{Prefix: prefix})
	lateCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	lk, err := late.Lock(lateCtx, "head")
	if err == nil {
		mustUnlock(t, lk)
		t.Fatal("Lock from a new Locker took the lock while a live waiter headed the queue")
	}
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late Lock: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	o := <-head
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.lk.id != headID {
		t.Fatalf("lock went to %s, want the head %s", o.lk.id, headID)
	}
	mustUnlock(t, o.lk)
}
