package guard

import (
	"context"
	"testing"
	"time"
)

// endedCtx is a ctx in the state a statement's ctx is in when the driver
// has seen it end but its AfterFunc functions have not run yet: Err says
// it ended, Done is not closed (for AfterFunc's watch, it never closes).
type endedCtx struct {
	context.Context
	done chan struct{}
}

func (c endedCtx) Done() <-chan struct{} { return c.done }
func (c endedCtx) Err() error            { return context.DeadlineExceeded }

// A statement the driver ended for its ctx can return, and its caller call
// stop, before the ctx's AfterFunc has started the KILL. With late set,
// stop sends the KILL itself (the claim: its server thread would wait on
// for innodb_lock_wait_timeout); without, it sends nothing (a batch
// member's KILL QUERY, which must not hit the next statement). A ctx that
// has not ended gets no KILL either way.
func TestOnEndStopKillsWhenCtxEndedBeforeItsAfterFuncRan(t *testing.T) {
	for _, c := range []struct {
		name        string
		ctx         context.Context
		late, wants bool
	}{
		{"ended, late", endedCtx{context.Background(), make(chan struct{})}, true, true},
		{"ended, not late", endedCtx{context.Background(), make(chan struct{})}, false, false},
		{"not ended, late", context.Background(), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			killed := make(chan struct{}, 1)
			stop := onEnd(c.ctx, time.Second, c.late, func(kctx context.Context, _ func()) {
				if kctx.Err() != nil {
					t.Error("the KILL's own ctx had ended before it ran")
				}
				killed <- struct{}{}
			})
			stop() // returns once a KILL it started has ended
			select {
			case <-killed:
				if !c.wants {
					t.Fatal("stop sent a KILL, want none")
				}
			default:
				if c.wants {
					t.Fatal("stop returned without the KILL: the claim's server thread would still wait")
				}
			}
			stop() // a second call does nothing more
			if len(killed) != 0 {
				t.Fatal("a second stop sent another KILL")
			}
		})
	}
}
