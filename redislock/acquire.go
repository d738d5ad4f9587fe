package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// attempt is one Lock or TryLock call.
type attempt struct {
	l     *Locker
	key   string
	k     lockKeys
	id    string // acquisition id; also the queue entry's id
	owner string
}

type acquireResult struct {
	granted bool
	token   uint64
	pttl    time.Duration // lease left (granted) or holder's lease left; <0 unknown
	head    bool          // not granted, first in the queue
}

// call runs acquire.lua once; sent is when the request left, a lower bound for
// when Redis ran it.
func (a *attempt) call(ctx context.Context, try bool) (r acquireResult, sent time.Time, err error) {
	l := a.l
	tryArg := "0"
	if try {
		tryArg = "1"
	}
	sent = time.Now()
	res, err := scriptAcquire.Run(ctx, l.rdb, a.k.all(), a.id, a.owner, l.ms(l.opt.LeaseTTL),
		l.ms(l.opt.TokenTTL), l.ms(l.opt.WaiterTimeout), l.ms(l.opt.WaiterTimeout), tryArg, l.pubcmd).Slice()
	if err != nil {
		return r, sent, err
	}
	if len(res) < 3 {
		return r, sent, fmt.Errorf("redislock: unexpected acquire reply %v", res)
	}
	flag, _ := res[0].(int64)
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

func (a *attempt) try(ctx context.Context) (*Lock, error) {
	r, sent, err := a.call(ctx, true)
	if err != nil {
		// The request may have applied with its reply lost: release a grant
		// rather than leave it to its lease.
		return nil, a.giveUp(ctx, fmt.Errorf("redislock: acquire %q: %w", a.key, err))
	}
	if !r.granted {
		return nil, ErrNotAcquired
	}
	return a.finish(ctx, r.token, sent.Add(r.pttl), false)
}

// wait is Lock: enqueue, then wait for a grant message or re-check on a
// bounded timer, until granted or ctx ends.
func (a *attempt) wait(ctx context.Context) (*Lock, error) {
	l := a.l
	s := l.subscriberFor(a.k)
	w := s.register(a.id, a.k.ch)
	defer s.unregister(w)

	r, sent, err := a.call(ctx, false)
	if err != nil {
		return nil, a.giveUp(ctx, fmt.Errorf("redislock: acquire %q: %w", a.key, err))
	}
	if r.granted {
		return a.finish(ctx, r.token, sent.Add(r.pttl), false)
	}
	// lastDenied is when the last "not granted" answer was requested: any
	// hand-off to us happened after it, so its lease runs at least until
	// lastDenied + WaiterTimeout.
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
			return a.finish(ctx, tok, lastDenied.Add(l.opt.WaiterTimeout), true)
		case <-ctx.Done():
			return nil, a.giveUp(ctx, ctx.Err())
		case <-l.closing:
			return nil, a.giveUp(ctx, ErrClosed)
		case <-timer.C:
		}
		r, sent, err = a.call(ctx, false)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, a.giveUp(ctx, ctx.Err())
		case err != nil:
			if time.Since(lastDenied) > l.opt.WaiterTimeout {
				// Our entry has expired by now; stop rather than wait unseen.
				return nil, a.giveUp(ctx, fmt.Errorf("redislock: re-check %q: %w", a.key, err))
			}
			l.opt.Logger.Warn("redislock: re-check failed", "key", a.key, "err", err)
			r = acquireResult{pttl: -1}
		case r.granted:
			return a.finish(ctx, r.token, sent.Add(r.pttl), false)
		default:
			lastDenied = sent
		}
	}
}

// giveUp leaves the queue, releasing a grant that may have raced with the
// exit, and returns cause joined with ErrNotAcquired.
func (a *attempt) giveUp(ctx context.Context, cause error) error {
	l := a.l
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opt.WaiterTimeout)
	defer cancel()
	err := scriptLeave.Run(cctx, l.rdb, a.k.all(), a.id, l.ms(l.opt.TokenTTL), l.pubcmd).Err()
	if err != nil {
		l.opt.Logger.Warn("redislock: leaving the queue failed; the entry expires by itself",
			"key", a.key, "err", err)
	}
	return errors.Join(ErrNotAcquired, cause)
}

// finish turns a grant into a Lock: it undoes the grant when ctx ended or the
// Locker closed meanwhile, waits for replicas when asked to, and hands the
// lock to the renewer. deadline is a lower bound of the lease end in Redis;
// handoff tells the lock came by message and still has the short hand-off
// lease.
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
	lk := &Lock{l: l, key: a.key, k: a.k, id: a.id, owner: a.owner, token: token, done: make(chan struct{})}
	lease := l.opt.LeaseTTL
	if handoff {
		lease = l.opt.WaiterTimeout
	}
	if l.opt.MinReplicas > 0 {
		sent, err := a.awaitReplicas(ctx)
		if err != nil {
			return nil, a.giveUp(ctx, err)
		}
		deadline, lease = sent.Add(l.opt.LeaseTTL), l.opt.LeaseTTL
	}
	l.renew.add(lk, deadline, lease)
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
	keys, args := []string{a.k.lock}, []any{l.ms(l.opt.LeaseTTL), a.id}
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
	sent, renew, wait, err := run(false)
	if err != nil && redis.HasErrorPrefix(renew.Err(), "NOSCRIPT") {
		sent, renew, wait, err = run(true)
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
