package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// stallRenewals is a client hook that holds back every renewal call carrying
// one of the chosen lock keys until the test ends, as a call stuck on a dead
// connection would be; such calls never reach Redis, whatever their context
// says. It reports each stalled call and each renewal that got through.
type stallRenewals struct {
	passHooks
	mu      sync.Mutex
	keys    map[string]bool
	renewed map[string]chan struct{} // closed at the key's first renewal
	stalled chan string              // the stalled key of each held-back call
	release chan struct{}
	once    sync.Once
}

func newStallRenewals() *stallRenewals {
	return &stallRenewals{keys: map[string]bool{}, renewed: map[string]chan struct{}{},
		stalled: make(chan string, 64), release: make(chan struct{})}
}

func (h *stallRenewals) stall(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys[key] = true
}

// renewedCh returns a channel closed when a renewal carrying key succeeds.
func (h *stallRenewals) renewedCh(key string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.renewed[key]
	if ch == nil {
		ch = make(chan struct{})
		h.renewed[key] = ch
	}
	return ch
}

func (h *stallRenewals) releaseAll() { h.once.Do(func() { close(h.release) }) }

func (h *stallRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	renewSrc := luaSource("renew.lua")
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 3 || (args[1] != scriptRenew.Hash() && args[1] != renewSrc) {
			return next(ctx, cmd)
		}
		n, _ := args[2].(int)
		var keys []string
		for _, a := range args[3 : 3+n] {
			keys = append(keys, a.(string))
		}
		h.mu.Lock()
		i := slices.IndexFunc(keys, func(k string) bool { return h.keys[k] })
		h.mu.Unlock()
		if i >= 0 {
			select {
			case h.stalled <- keys[i]:
			default:
			}
			<-h.release
			err := errors.New("stalled renewal released")
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		if err == nil {
			h.mu.Lock()
			for _, k := range keys {
				if ch := h.renewed[k]; ch != nil {
					select {
					case <-ch:
					default:
						close(ch)
					}
				}
			}
			h.mu.Unlock()
		}
		return err
	}
}

// renewalFixture is a Locker whose client stalls chosen renewals, another
// Locker on the same locks, and a lock of the first whose renewal call hangs.
type renewalFixture struct {
	rdb   redis.UniversalClient
	hook  *stallRenewals
	l     *Locker
	other *Locker
	stuck *Lock
}

func newRenewalFixture(t *testing.T) *renewalFixture {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	f := &renewalFixture{rdb: rdb, hook: newStallRenewals()}
	rdb.AddHook(f.hook)
	opt := &Options{Prefix: testenv.Prefix(t), LeaseTTL: 4 * time.Second, WaiterTimeout: time.Second,
		RecheckInterval: 300 * time.Millisecond}
	f.l = newTestLocker(t, f.rdb, opt)
	t.Cleanup(f.hook.releaseAll) // before the Locker closes: Close waits for the stalled calls
	f.other = newTestLocker(t, testenv.Redis(t), opt)
	f.hook.stall(f.l.keys("stuck").lock)
	f.stuck = mustLock(t, f.l, "stuck")
	select {
	case <-f.hook.stalled:
	case <-time.After(f.l.opt.LeaseTTL):
		t.Fatal("the renewal of the stuck lock never started")
	}
	return f
}

// handOver makes other hold key, queues l behind it, releases, and returns l's
// lock, which carries the short hand-off lease, and when the hand-off was
// requested.
func (f *renewalFixture) handOver(t *testing.T, key string) (*Lock, time.Time) {
	t.Helper()
	holder := mustLock(t, f.other, key)
	res := lockAsync(f.l, testCtx(t), key)
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, f.rdb, f.l, key)) == 1 })
	start := time.Now()
	mustUnlock(t, holder)
	out := <-res
	if out.err != nil {
		t.Fatal(out.err)
	}
	return out.lk, start
}

// lostBeforeTaken queues a waiter of another Locker behind lk, whose lease
// cannot be renewed, and checks that lk's Done closes before that waiter gets
// the lock, which happens as soon as the lease has ended in Redis.
func (f *renewalFixture) lostBeforeTaken(t *testing.T, lk *Lock) {
	t.Helper()
	next := lockAsync(f.other, testCtx(t), lk.Key())
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(queue(t, f.rdb, f.l, lk.Key())) == 1 })
	select {
	case <-lk.Done():
	case o := <-next:
		if o.err != nil {
			t.Fatal(o.err)
		}
		t.Fatalf("%s: another Locker got the lock (token %d) while Done of the holder (token %d) was open",
			lk.Key(), o.lk.Token(), lk.Token())
	}
	if !errors.Is(lk.Err(), ErrLost) {
		t.Fatalf("%s: Err = %v, want ErrLost", lk.Key(), lk.Err())
	}
	o := <-next
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.lk.Token() <= lk.Token() {
		t.Fatalf("%s: token %d after %d", lk.Key(), o.lk.Token(), lk.Token())
	}
	mustUnlock(t, o.lk)
}

// A lock handed over while the renewal call of another lock hangs gets its
// own renewal before its hand-off lease runs out.
func TestHandOffRenewedWhileAnotherRenewalHangs(t *testing.T) {
	f := newRenewalFixture(t)
	w := f.l.opt.WaiterTimeout
	renewed := f.hook.renewedCh(f.l.keys("fresh").lock)
	fresh, start := f.handOver(t, "fresh")
	select {
	case <-renewed:
	case <-fresh.Done():
		t.Fatalf("hand-off lost while another renewal hung: %v", fresh.Err())
	case <-time.After(w - time.Since(start)):
		t.Fatal("hand-off not renewed within its lease while another renewal hung")
	}
	pttl, err := f.rdb.PTTL(testCtx(t), fresh.k.lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl <= w {
		t.Fatalf("lease of the renewed hand-off is %v, want the full %v", pttl, f.l.opt.LeaseTTL)
	}
	f.lostBeforeTaken(t, f.stuck)
	if err := fresh.Err(); err != nil {
		t.Fatalf("hand-off lost while renewed: %v", err)
	}
	mustUnlock(t, fresh)
}

// A lock handed over while the renewal call of another lock hangs, and whose
// own renewal hangs as well, is reported lost before its hand-off lease ends
// in Redis (before another process can take it), not when the other call
// gives up; so is the lock of the first hung call.
func TestHandOffLossReportedWhileAnotherRenewalHangs(t *testing.T) {
	f := newRenewalFixture(t)
	w := f.l.opt.WaiterTimeout
	f.hook.stall(f.l.keys("doomed").lock)
	doomed, start := f.handOver(t, "doomed")
	f.lostBeforeTaken(t, doomed)
	if el := time.Since(start); el < w/2 {
		t.Fatalf("hand-off declared lost %v after it was granted, long before its lease of %v could end", el, w)
	}
	if !strings.Contains(doomed.Err().Error(), "without a successful renewal") {
		t.Fatalf("Err = %v", doomed.Err())
	}
	f.lostBeforeTaken(t, f.stuck)
}

// On a cluster, the renewals of different hash slots go out independently: a
// call that hangs for one slot delays neither the renewal of the locks in
// other slots nor the loss of its own lock.
func TestClusterSlotRenewalsIndependent(t *testing.T) {
	cc := startCluster(t)
	hook := newStallRenewals()
	cc.AddHook(hook)
	opt := &Options{Prefix: "rf", LeaseTTL: 1500 * time.Millisecond, WaiterTimeout: 600 * time.Millisecond,
		RecheckInterval: 300 * time.Millisecond}
	l := newTestLocker(t, cc, opt)
	t.Cleanup(hook.releaseAll) // before the Locker closes: Close waits for the stalled calls
	other := newTestLocker(t, cc, opt)
	f := &renewalFixture{rdb: cc, hook: hook, l: l, other: other}
	slots := map[int]bool{}
	var held []*Lock
	for i := 0; len(held) < 8; i++ {
		k := fmt.Sprintf("slot-%d", i)
		if s := hashSlot(l.keys(k).lock); !slots[s] {
			slots[s] = true
			if len(held) == 0 {
				hook.stall(l.keys(k).lock)
			}
			held = append(held, mustLock(t, l, k))
		}
	}
	stuck, healthy := held[0], held[1:]
	select {
	case <-hook.stalled:
	case <-time.After(l.opt.LeaseTTL):
		t.Fatal("the renewal of the stuck lock never started")
	}
	stalledAt := time.Now()
	renewed := make([]<-chan struct{}, len(healthy))
	for i, lk := range healthy {
		renewed[i] = hook.renewedCh(lk.k.lock)
	}
	for i, lk := range healthy {
		select {
		case <-renewed[i]:
		case <-lk.Done():
			t.Fatalf("%s lost while the renewal of another slot hung: %v", lk.Key(), lk.Err())
		case <-time.After(l.opt.LeaseTTL - time.Since(stalledAt)):
			t.Fatalf("%s not renewed within a lease while the renewal of another slot hung", lk.Key())
		}
	}
	f.lostBeforeTaken(t, stuck)
	for _, lk := range healthy {
		if err := lk.Err(); err != nil {
			t.Fatalf("%s lost: %v", lk.Key(), err)
		}
		mustUnlock(t, lk)
	}
}
