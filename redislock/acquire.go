package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/errs"
)

// attempt is one Lock or TryLock call.
type attempt struct {
	l     *Locker
	key   string
	k     lockKeys
	id    string // acquisition id; also the queue entry's id
	owner string
	lease *leaseSpec
	// queued, when set, is called once the first request queued the
	// caller (see WithQueued).
	queued func()
	// leaving is set once the queue clean-up (leave) has been handed to the
	// background.
	leaving bool
}

// The mode argument of acquire.lua, boxed once: a re-check of a waiting Lock,
// TryLock, the first call of a waiting Lock (whose id is new, so it is
// queued only if the client applied the same request before: it keeps that
// place).
var argRecheck, argTry, argFirst any = "0", "1", "2"

type acquireResult struct {
	granted bool
	token   uint64
	pttl    time.Duration // lease left (granted) or holder's lease left; <0 unknown
	head    bool          // not granted, first in the queue
}

// call runs acquire.lua once in mode (argRecheck, argTry or argFirst); sent
// is when the request left, a lower bound for when Redis ran it.
func (a *attempt) call(ctx context.Context, mode any) (r acquireResult, sent time.Time, err error) {
	l := a.l
	sent = time.Now()
	var res []any
	gaveUp, err := l.do(ctx, func() error {
		var err error
		res, err = scriptAcquire.Run(ctx, l.rdb, a.k.all(), a.id, a.owner, a.lease.ttlArg,
			l.args.tokenTTL, l.args.waiter, a.lease.handoffArg, mode, l.args.pubcmd).Slice()
		return err
	}, a.leave)
	if gaveUp {
		a.leaving = true // a.leave runs once the request has finished
	}
	if err != nil {
		return r, sent, err
	}
	if len(res) < 3 {
		return r, sent, fmt.Errorf("redislock: unexpected acquire reply %v", res)
	}
	flag, _ := res[0].(int64)
	if flag == -1 {
		return r, sent, fmt.Errorf("%w: the stored token is 2^64-1", ErrTokenOverflow)
	}
	pttl, _ := res[2].(int64)
	r.granted = flag == 1
	r.pttl = time.Duration(pttl) * time.Millisecond
	if pttl < 0 {
		r.pttl = -1
	}
	if r.granted {
		s, _ := res[1].(string)
		if r.token, err = strconv.ParseUint(s, 10, 64); err != nil {
			return r, sent, fmt.Errorf("redislock: bad token %q from Redis: %w", s, err)
		}
	} else if len(res) > 3 {
		h, _ := res[3].(int64)
		r.head = h == 1
	}
	return r, sent, nil
}

// handedOver tells whether a grant reported by acquire.lua still carries
// the hand-off lease: the lock was handed to this waiter before the call, and
// its lease is shorter than a fresh grant's.
func (a *attempt) handedOver(r acquireResult) bool {
	return r.pttl >= 0 && r.pttl < a.lease.ttl
}

func (a *attempt) try(ctx context.Context) (*Lock, error) {
	r, sent, err := a.call(ctx, argTry)
	if err != nil {
		// The request may have applied with its reply lost: release a grant
		// rather than leave it to its lease.
		return nil, a.giveUp(ctx, a.callErr(ctx, err))
	}
	if !r.granted {
		return nil, ErrNotAcquired
	}
	return a.finish(ctx, r.token, sent.Add(r.pttl), a.handedOver(r))
}

// wait is Lock: enqueue, then wait for a grant message or re-check on a
// bounded timer, until granted or ctx ends.
func (a *attempt) wait(ctx context.Context) (*Lock, error) {
	l := a.l
	s := l.subscriberFor(a.k)
	w := s.register(a.id, l.waitChannel(a.k))
	defer s.unregister(w)

	r, sent, err := a.call(ctx, argFirst)
	if err != nil {
		return nil, a.giveUp(ctx, a.callErr(ctx, err))
	}
	if r.granted {
		return a.finish(ctx, r.token, sent.Add(r.pttl), a.handedOver(r))
	}
	if a.queued != nil {
		a.queued()
	}
	// lastDenied is when the last "not granted" answer was requested: any
	// hand-off to us happened after it, so its lease runs at least until
	// lastDenied + the hand-off lease.
	lastDenied := sent
	recheckNow := false
	if !w.subscribed {
		// A grant published before the subscription took effect is missed:
		// look again as soon as it has.
		s.subscribe(ctx, w, l.opt.RecheckInterval)
		recheckNow = true
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		d := l.opt.RecheckInterval
		if recheckNow {
			d = 0
		} else if r.head && r.pttl >= 0 {
			d = min(d, r.pttl+time.Millisecond)
		}
		recheckNow = false
		timer.Reset(d)
		select {
		case tok := <-w.grant:
			return a.finish(ctx, tok, lastDenied.Add(a.lease.handoff), true)
		case <-w.recheck: // a hand-off to us may have gone untold
		case <-ctx.Done():
			return nil, a.giveUp(ctx, ctx.Err())
		case <-l.closing:
			return nil, a.giveUp(ctx, ErrClosed)
		case <-timer.C:
		}
		r, sent, err = a.call(ctx, argRecheck)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, a.giveUp(ctx, ctx.Err())
		case errors.Is(err, ErrTokenOverflow):
			return nil, a.giveUp(ctx, a.callErr(ctx, err))
		case err != nil:
			if time.Since(lastDenied) > l.opt.WaiterTimeout {
				// Our entry has expired by now; stop rather than wait unseen.
				return nil, a.giveUp(ctx, fmt.Errorf("redislock: re-check %q: %w", a.key, err))
			}
			l.opt.Logger.Warn("redislock: re-check failed", "key", a.key, "err", err)
			r = acquireResult{pttl: -1}
		case r.granted:
			return a.finish(ctx, r.token, sent.Add(r.pttl), a.handedOver(r))
		default:
			lastDenied = sent
		}
	}
}

// callErr describes a failed acquire request: ctx's error alone when ctx
// ended (the request failed or was abandoned because of it).
func (a *attempt) callErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("redislock: acquire %q: %w", a.key, err)
}

// giveUp runs the queue clean-up in the background and returns cause joined
// with ErrNotAcquired. It waits for the clean-up only while ctx lasts, so the
// caller returns at once when ctx has ended, whatever state Redis is in.
func (a *attempt) giveUp(ctx context.Context, cause error) error {
	if !a.leaving {
		a.leaving = true
		left := make(chan struct{})
		a.l.goOwned(func() {
			defer close(left)
			a.leave()
		})
		select {
		case <-left:
		case <-ctx.Done():
		}
	}
	return errs.Join(ErrNotAcquired, cause)
}

// leave takes the attempt out of the queue, releasing a grant that may have
// raced with the exit. It is idempotent and bounded by WaiterTimeout, after
// which an unrefreshed queue entry and a hand-off lease have expired anyway.
func (a *attempt) leave() {
	l := a.l
	ctx, cancel := context.WithTimeout(context.Background(), l.opt.WaiterTimeout)
	defer cancel()
	err := named(l.rdb, scriptLeave.Run(ctx, l.rdb, a.k.all(), a.id, l.args.tokenTTL, l.args.pubcmd, a.lease.ttlArg).Err())
	if err != nil {
		l.opt.Logger.Warn("redislock: leaving the queue failed; the entry expires by itself",
			"key", a.key, "err", err)
	}
}

// finish turns a grant into a Lock: it undoes the grant when ctx ended or the
// Locker closed meanwhile, waits for replicas when asked to, and hands the
// lock to the renewer. deadline is a lower bound of the lease end in Redis;
// handoff tells that the lease is the short hand-off lease rather than a full
// one.
func (a *attempt) finish(ctx context.Context, token uint64, deadline time.Time, handoff bool) (*Lock, error) {
	l := a.l
	if err := ctx.Err(); err != nil {
		return nil, a.giveUp(ctx, err)
	}
	select {
	case <-l.closing:
		return nil, a.giveUp(ctx, ErrClosed)
	default:
	}
	lk := &Lock{l: l, key: a.key, k: a.k, id: a.id, owner: a.owner, token: token, lease: a.lease,
		done: make(chan struct{})}
	if l.opt.MinReplicas > 0 {
		sent, err := a.awaitReplicas(ctx)
		if err != nil {
			return nil, a.giveUp(ctx, err)
		}
		deadline, handoff = sent.Add(a.lease.ttl), false
	}
	l.renew.add(lk, deadline, handoff)
	return lk, nil
}

// awaitReplicas renews the new grant and runs WAIT on the same connection, so
// that WAIT covers the grant itself (replication keeps order). It returns when
// the renewal was sent.
func (a *attempt) awaitReplicas(ctx context.Context) (time.Time, error) {
	l := a.l
	c, err := l.scripter(ctx, a.k)
	if err != nil {
		return time.Time{}, err
	}
	keys, args := []string{a.k.lock}, []any{a.lease.ttlArg, a.id}
	run := func(useEval bool) (time.Time, *redis.Cmd, *redis.Cmd, error) {
		pipe := c.Pipeline()
		var renew *redis.Cmd
		if useEval {
			renew = scriptRenew.Eval(ctx, pipe, keys, args...)
		} else {
			renew = scriptRenew.EvalSha(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", l.opt.MinReplicas, l.ms(l.opt.ReplicaTimeout))
		sent := time.Now()
		_, err := pipe.Exec(ctx)
		return sent, renew, wait, err
	}
	var sent time.Time
	var renew, wait *redis.Cmd
	gaveUp, err := l.do(ctx, func() error {
		var err error
		sent, renew, wait, err = run(false)
		if err != nil && redis.HasErrorPrefix(renew.Err(), "NOSCRIPT") {
			sent, renew, wait, err = run(true)
		}
		return err
	}, a.leave)
	if gaveUp {
		a.leaving = true
		return time.Time{}, err
	}
	if err != nil {
		return sent, fmt.Errorf("redislock: wait for replicas of %q: %w", a.key, err)
	}
	if held, _ := renew.Slice(); len(held) != 1 || held[0] != int64(1) {
		return sent, ErrLost
	}
	if n, _ := wait.Int64(); n < int64(l.opt.MinReplicas) {
		return sent, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, n, l.opt.MinReplicas, l.opt.ReplicaTimeout)
	}
	return sent, nil
}
