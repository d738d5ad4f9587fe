package redislock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber multiplexes the grant messages of every lock a Locker waits for
// (in one hash slot, for a cluster) over one pub/sub connection, and routes
// each message to its waiter by id. Channels are subscribed while someone
// waits on them and dropped after lingering idle for a while, so that
// back-to-back waits on a hot lock do not resubscribe every time. A
// subscriber left with no channel retires: it closes its connection and
// leaves the Locker, so that a Locker waiting on ever new hash slots keeps
// connections only for the slots waited on lately.
type subscriber struct {
	l    *Locker
	slot int // its key in Locker.subs

	io sync.Mutex // orders SUBSCRIBE/UNSUBSCRIBE writes; guards ps creation
	ps *redis.PubSub

	mu      sync.Mutex
	chans   map[string]*chanState
	waiters map[string]*waiter
	// pending counts the callers given this subscriber by subscriberFor that
	// have not registered yet; it must not retire under them.
	pending int
	closed  bool          // closed or retired: it subscribes no more
	done    chan struct{} // closed when the dispatch goroutine ends (if started)
	started bool
}

type chanState struct {
	refs        int
	waiters     map[string]*waiter // the registered waiters on the channel, by id
	subscribing bool
	confirmed   chan struct{} // closed when Redis confirmed the subscription
	isConfirmed bool
	idleSince   time.Time
}

type waiter struct {
	id, ch     string
	grant      chan uint64   // the token of a hand-off to this waiter
	recheck    chan struct{} // the waiter should re-check at once
	subscribed bool          // the channel was confirmed when the waiter registered
}

func newSubscriber(l *Locker, slot int) *subscriber {
	return &subscriber{l: l, slot: slot, chans: map[string]*chanState{}, waiters: map[string]*waiter{},
		done: make(chan struct{})}
}

// register makes messages for waiter id on ch reach the returned waiter. The
// subscriber must come from subscriberFor, once per register.
func (s *subscriber) register(id, ch string) *waiter {
	w := &waiter{id: id, ch: ch, grant: make(chan uint64, 1), recheck: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	cs := s.chans[ch]
	if cs == nil {
		cs = &chanState{confirmed: make(chan struct{}), waiters: map[string]*waiter{}}
		s.chans[ch] = cs
	}
	cs.refs++
	cs.waiters[id] = w
	w.subscribed = cs.isConfirmed
	s.waiters[id] = w
	return w
}

func (s *subscriber) unregister(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiters, w.id)
	if cs := s.chans[w.ch]; cs != nil {
		cs.refs--
		delete(cs.waiters, w.id)
		switch {
		case cs.refs > 0:
		case !cs.isConfirmed && !cs.subscribing:
			delete(s.chans, w.ch) // never subscribed: an uncontended lock
		default:
			cs.idleSince = time.Now()
		}
	}
}

// subscribe makes sure w's channel is subscribed and waits, at most maxWait,
// for Redis to confirm it. The request is sent from a goroutine owned by the
// Locker (a new connection may hang as long as the client lets it), so that
// ctx alone bounds the caller. Failures only cost latency: waiters re-check on
// a timer anyway. Only calls in flight may use it.
func (s *subscriber) subscribe(ctx context.Context, w *waiter, maxWait time.Duration) {
	s.mu.Lock()
	cs := s.chans[w.ch]
	need := !cs.isConfirmed && !cs.subscribing && !s.closed
	if need {
		cs.subscribing = true
	}
	confirmed := cs.confirmed
	s.mu.Unlock()
	if need {
		s.l.goOwned(func() {
			sctx, cancel := context.WithTimeout(context.Background(), s.l.opt.WaiterTimeout)
			defer cancel()
			if err := s.send(sctx, w.ch); err != nil {
				s.l.opt.Logger.Warn("redislock: subscribe failed; waiting on timers", "channel", w.ch, "err", named(s.l.rdb, err))
				s.mu.Lock()
				cs.subscribing = false
				s.mu.Unlock()
			}
		})
	}
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-confirmed:
	case <-ctx.Done():
	case <-s.l.closing:
	case <-t.C:
	}
}

// send writes SUBSCRIBE (SSUBSCRIBE on a cluster) for ch, creating the
// connection and the dispatch goroutine on first use.
func (s *subscriber) send(ctx context.Context, ch string) error {
	s.io.Lock()
	defer s.io.Unlock()
	if s.ps == nil {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		s.started = true
		s.mu.Unlock()
		if s.l.cluster {
			s.ps = s.l.rdb.SSubscribe(ctx, ch)
		} else {
			s.ps = s.l.rdb.Subscribe(ctx, ch)
		}
		msgs := s.ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
		// Close waits for this goroutine even after the subscriber retired.
		// send runs on a goroutine owned by a call in flight, so Close is not
		// waiting yet.
		s.l.subsRunning.Add(1)
		go func() {
			defer s.l.subsRunning.Done()
			s.dispatch(msgs)
		}()
		return nil
	}
	if s.l.cluster {
		return s.ps.SSubscribe(ctx, ch)
	}
	return s.ps.Subscribe(ctx, ch)
}

// dispatch routes the messages until the connection is closed, by close or
// on retirement.
func (s *subscriber) dispatch(msgs <-chan any) {
	defer close(s.done)
	linger := max(s.l.opt.WaiterTimeout, time.Second)
	sweep := time.NewTicker(linger / 2)
	defer sweep.Stop()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
					s.confirm(m.Channel)
				}
			case *redis.Message:
				s.deliver(m.Payload)
			}
		case <-sweep.C:
			s.sweep(linger)
		}
	}
}

func (s *subscriber) confirm(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cs := s.chans[ch]; cs != nil && !cs.isConfirmed {
		cs.isConfirmed, cs.subscribing = true, false
		close(cs.confirmed)
	}
}

// deliver routes "<waiter id> <token>" to the waiter, if it still waits.
func (s *subscriber) deliver(payload string) {
	id, tok, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		s.l.opt.Logger.Warn("redislock: bad grant message", "payload", payload)
		return
	}
	s.mu.Lock()
	w := s.waiters[id]
	s.mu.Unlock()
	if w != nil {
		select {
		case w.grant <- token:
		default:
		}
	}
}

// tellWaiter delivers a hand-off, "<waiter id> <token>", to a waiter of this
// Locker on k, as if it had come over pub/sub.
func (l *Locker) tellWaiter(k lockKeys, payload string) {
	if s := l.subscriberOf(k); s != nil {
		s.deliver(payload)
	}
}

// wakeWaiters makes this Locker's waiters on k re-check now: an Unlock whose
// reply was lost may have handed one of them the lock without telling it.
func (l *Locker) wakeWaiters(k lockKeys) {
	s := l.subscriberOf(k)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cs := s.chans[l.waitChannel(k)]; cs != nil {
		for _, w := range cs.waiters {
			select {
			case w.recheck <- struct{}{}:
			default:
			}
		}
	}
}

// sweep unsubscribes channels nobody has waited on for linger, and retires
// the subscriber when no channel is left.
func (s *subscriber) sweep(linger time.Duration) {
	s.io.Lock()
	defer s.io.Unlock()
	var idle []string
	now := time.Now()
	s.mu.Lock()
	for ch, cs := range s.chans {
		// A channel whose SUBSCRIBE is on its way stays until answered.
		if cs.refs == 0 && !cs.subscribing && now.Sub(cs.idleSince) >= linger {
			idle = append(idle, ch)
			delete(s.chans, ch)
		}
	}
	empty := len(s.chans) == 0
	s.mu.Unlock()
	if empty && s.retire() {
		// Closing the connection drops its subscriptions and ends dispatch.
		_ = s.ps.Close()
		return
	}
	if len(idle) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), linger)
	defer cancel()
	var err error
	if s.l.cluster {
		err = s.ps.SUnsubscribe(ctx, idle...)
	} else {
		err = s.ps.Unsubscribe(ctx, idle...)
	}
	if err != nil {
		s.l.opt.Logger.Warn("redislock: unsubscribe failed", "err", err)
	}
}

// retire takes s out of the Locker if nobody uses it, and reports whether it
// did; s subscribes no more then. The caller holds s.io.
func (s *subscriber) retire() bool {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unused() {
		return false
	}
	s.closed = true
	if l.subs[s.slot] == s {
		delete(l.subs, s.slot)
	}
	return true
}

// unused reports whether s serves nobody and nobody is about to register.
// The caller holds s.mu.
func (s *subscriber) unused() bool {
	return !s.closed && s.pending == 0 && len(s.waiters) == 0 && len(s.chans) == 0
}

// close ends the subscription and waits for the dispatch goroutine.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.io.Lock()
	ps, started := s.ps, s.started
	s.io.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	if started {
		<-s.done
	}
}
