package guard

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		n        int
		min, max time.Duration
		r        float64
		want     time.Duration
	}{
		{n: 1, min: 10 * ms, max: 500 * ms, r: 0, want: 5 * ms},
		{n: 1, min: 10 * ms, max: 500 * ms, r: 0.999999, want: 10 * ms},
		{n: 2, min: 10 * ms, max: 500 * ms, r: 0.999999, want: 20 * ms},
		{n: 3, min: 10 * ms, max: 500 * ms, r: 0, want: 20 * ms},
		{n: 6, min: 10 * ms, max: 500 * ms, r: 0.999999, want: 320 * ms},
		{n: 7, min: 10 * ms, max: 500 * ms, r: 0.999999, want: 500 * ms},    // capped
		{n: 1000, min: 10 * ms, max: 500 * ms, r: 0.999999, want: 500 * ms}, // no overflow
		{n: 1, min: 0, max: 0, r: 0.5, want: 0},
		{n: 3, min: 7 * ms, max: 7 * ms, r: 0, want: 3500 * time.Microsecond},
	} {
		got := backoff(c.n, c.min, c.max, c.r)
		// r just below 1 gives just below d: allow a microsecond of rounding.
		if diff := got - c.want; diff > 0 || diff < -time.Microsecond {
			t.Errorf("backoff(%d, %v, %v, %v) = %v, want %v", c.n, c.min, c.max, c.r, got, c.want)
		}
	}
}

func TestBackoffJitterStaysInRange(t *testing.T) {
	for n := 1; n <= 10; n++ {
		for i := 0; i < 100; i++ {
			d := backoff(n, time.Millisecond, 100*time.Millisecond, jitter())
			full := min(time.Millisecond<<(n-1), 100*time.Millisecond)
			if d < full/2 || d > full {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", n, d, full/2, full)
			}
		}
	}
}

func TestSleepStopsAtContextEnd(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("lock lost")
	cancel(cause)
	if err := sleep(ctx, time.Hour); !errors.Is(err, cause) {
		t.Fatalf("sleep on an ended ctx = %v, want its cause", err)
	}
	if err := sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("sleep = %v, want nil", err)
	}
}
