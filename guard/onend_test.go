package guard

import (
	"context"
	"testing"
	"time"
)

// endedCtx is a ctx in the state a statement's ctx is in when the driver
// has seen it end but its AfterFunc functions have not started yet: Err
// says it ended, and Done, which AfterFunc watches, is not closed. (A
// standard ctx is in that state between the close of its Done channel and
// the start of its AfterFunc functions, too short a window to hit at will.)
type endedCtx struct {
	context.Context
	done chan struct{}
}

func (c endedCtx) Done() <-chan struct{} { return c.done }
func (c endedCtx) Err() error            { return context.DeadlineExceeded }

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// The KILL a ctx's end calls for:
//   - a statement the driver ended for its ctx can return, and its caller
//     call stop, before the ctx's AfterFunc has started the KILL: stop(true)
//     (the statement failed) sends it itself, for the claim's server thread
//     would wait on for innodb_lock_wait_timeout; stop(false) (it did not
//     fail, or its ctx is not the driver's, as a batch member's KILL QUERY)
//     sends nothing, which could end the next statement;
//   - a ctx that has not ended gets no KILL;
//   - once the KILL has started, stop returns only when it has ended,
//     whatever the statement did: Do never returns with it under way.
func TestOnEndStopKillsWhenCtxEndedBeforeItsAfterFuncRan(t *testing.T) {
	for _, c := range []struct {
		name          string
		ctx           context.Context
		failed, wants bool
	}{
		{"ended unseen, failed", endedCtx{context.Background(), make(chan struct{})}, true, true},
		{"ended unseen, did not fail", endedCtx{context.Background(), make(chan struct{})}, false, false},
		{"not ended, failed", context.Background(), true, false},
		{"ended and seen, did not fail", cancelled(), false, true},
		{"ended and seen, failed", cancelled(), true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			killed := make(chan struct{}, 2)
			stop := onEnd(c.ctx, time.Second, func(kctx context.Context, _ func()) {
				if kctx.Err() != nil {
					t.Error("the KILL's own ctx had ended before it ran")
				}
				killed <- struct{}{}
			})
			stop(c.failed) // returns once a KILL it started has ended
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
			stop(true) // a second call does nothing more
			if len(killed) != 0 {
				t.Fatal("a second stop sent another KILL")
			}
		})
	}
}
