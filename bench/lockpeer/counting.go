package main

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// attemptKey keys the attempt that a Lock call carries in its context.
type attemptKey struct{}

// attempt receives the queue sequence of the redislock Lock call it is
// attached to.
type attempt struct{ seq atomic.Int64 }

// countHook counts every command a client sends, pipelined ones included,
// and hands the queue sequence of a not-granted redislock acquire reply
// ({0, "", ms, head, seq}) to the attempt in the command's context.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		err := next(ctx, cmd)
		if at, ok := ctx.Value(attemptKey{}).(*attempt); ok && err == nil {
			if c, ok := cmd.(*redis.Cmd); ok {
				if res, ok := c.Val().([]any); ok && len(res) == 5 && res[0] == int64(0) {
					if seq, ok := res[4].(int64); ok {
						at.seq.CompareAndSwap(0, seq)
					}
				}
			}
		}
		return err
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
