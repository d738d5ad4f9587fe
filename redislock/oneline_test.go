package redislock

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// Errors that combine several causes print on one line, and errors.Is finds
// each cause.
func TestErrorsPrintOnOneLine(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	holder := mustLock(t, l, "busy")
	t.Cleanup(func() { mustUnlock(t, holder) })

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	closed := New(rdb, &Options{Prefix: testenv.Prefix(t)})
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	refused := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t))),
		MaxRetries: -1})
	t.Cleanup(func() { _ = refused.Close() })
	down := newTestLocker(t, refused, nil)

	lockErr := func(l *Locker, ctx context.Context) error {
		lk, err := l.Lock(ctx, "busy")
		if err == nil {
			mustUnlock(t, lk)
		}
		return err
	}
	var opErr *net.OpError
	for _, c := range []struct {
		name  string
		err   error
		finds []error
		as    any
	}{
		{"ctx ended before", lockErr(l, cancelled), []error{ErrNotAcquired, context.Canceled}, nil},
		{"ctx ended waiting", lockErr(l, short), []error{ErrNotAcquired, context.DeadlineExceeded}, nil},
		{"closed", lockErr(closed, testCtx(t)), []error{ErrNotAcquired, ErrClosed}, nil},
		{"transport", lockErr(down, testCtx(t)), []error{ErrNotAcquired}, &opErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil {
				t.Fatal("no error")
			}
			if msg := c.err.Error(); strings.ContainsAny(msg, "\r\n") {
				t.Errorf("message has a line break: %q", msg)
			}
			for _, want := range c.finds {
				if !errors.Is(c.err, want) {
					t.Errorf("%q: errors.Is(%v) = false", c.err, want)
				}
			}
			if c.as != nil && !errors.As(c.err, c.as) {
				t.Errorf("%q: errors.As(%T) = false", c.err, c.as)
			}
		})
	}
}
