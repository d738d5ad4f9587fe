package guard

// backoff.go owns the waits between attempts: jittered exponential
// backoff, and a sleep that ends with its ctx.

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff returns the pause after failed attempt n (n >= 1): min·2^(n-1)
// capped at max, scaled by 0.5+r/2 for r in [0, 1) so that callers retrying
// together spread out (the result lies in [d/2, d]).
func backoff(n int, minD, maxD time.Duration, r float64) time.Duration {
	d := minD
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	return time.Duration(float64(d) * (0.5 + r/2))
}

// sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx's error in the second case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// jitter is the random factor of backoff.
func jitter() float64 { return rand.Float64() }
