package chaos

import (
	"context"
	"errors"
	"github.com/redis/go-redis/v9"
	"strconv"
	"strings"
	"time"
)

// procBuy is a buy sent to a holder process and recorded in the history.
type procBuy struct {
	p *Pending
	h *Holder
}

// sendBuy asks holder h (history client id) to buy qty units; with wait the
// holder stops inside fn until told "go".
func (e *env) sendBuy(h *Holder, clientID, qty int, wait bool) *procBuy {
	e.t.Helper()
	p := e.h.Invoke(clientID, Buy, qty)
	cmd := "buy " + p.ID() + " " + strconv.Itoa(qty)
	if wait {
		cmd += " wait"
	}
	if err := h.Send("%s", cmd); err != nil {
		e.t.Fatalf("send to holder: %v", err)
	}
	return &procBuy{p: p, h: h}
}

// done waits for the holder's report of the buy and records it.
func (b *procBuy) done(ctx context.Context) (Op, error) {
	ev, err := b.h.Expect(ctx, "done")
	if err != nil {
		return Op{}, err
	}
	if len(ev.Fields) < 3 || ev.Fields[0] != b.p.ID() {
		return Op{}, errors.New("holder reported " + strings.Join(ev.Fields, " ") + " for " + b.p.ID())
	}
	token, _ := strconv.ParseUint(ev.Fields[2], 10, 64)
	var opErr error
	if len(ev.Fields) > 3 {
		opErr = errors.New(strings.Join(ev.Fields[3:], " "))
	}
	return b.p.Return(ParseOutcome(ev.Fields[1]), 0, token, opErr), nil
}

// lost records the buy as of unknown outcome (its process was killed).
func (b *procBuy) lost(why string) Op {
	return b.p.Return(Unknown, 0, 0, errors.New(why))
}

// infn waits for the holder to stop inside fn and returns its token and
// MySQL connection id.
func infn(ctx context.Context, h *Holder) (token uint64, conn int64, err error) {
	var ev Event
	for ev.Verb != "infn" {
		select {
		case e, ok := <-h.Events:
			if !ok {
				return 0, 0, errors.New("holder exited before reaching fn")
			}
			if e.Verb == "done" {
				return 0, 0, errors.New("holder finished without pausing in fn: " + strings.Join(e.Fields, " "))
			}
			ev = e
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	if len(ev.Fields) < 3 {
		return 0, 0, errors.New("bad infn line")
	}
	token, _ = strconv.ParseUint(ev.Fields[1], 10, 64)
	conn, _ = strconv.ParseInt(ev.Fields[2], 10, 64)
	return token, conn, nil
}

// awaitQueue waits until n waiters are queued for the item.
func (e *env) awaitQueue(ctx context.Context, rdb *redis.Client, n int64, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		q, err := e.queueLen(ctx, rdb)
		return q >= n, err
	})
}
