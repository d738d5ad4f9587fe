package redislock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/testenv"
)

// lockedBuffer is a bytes.Buffer safe for a logger's goroutines and the
// test's reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Without Options.Logger, a lost lock is reported to slog.Default(), and
// nothing below Warn is.
func TestDefaultLoggerWarnsThroughSlogDefault(t *testing.T) {
	out := &lockedBuffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	rdb := testenv.Redis(t)
	hooked := make(chan error, 1)
	l := newTestLocker(t, rdb, &Options{LeaseTTL: 300 * time.Millisecond,
		OnLost: func(key string, token uint64, err error) { hooked <- err }})
	if l.opt.Logger.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("the default logger takes records below Warn")
	}
	lk := mustLock(t, l, "logged")
	rdb.Del(testCtx(t), lk.k.lock)
	// OnLost runs after the warning is logged, on the same goroutine.
	select {
	case err := <-hooked:
		if !errors.Is(err, ErrLost) {
			t.Fatalf("OnLost got %v", err)
		}
	case <-time.After(10 * l.opt.LeaseTTL):
		t.Fatal("the loss was not found")
	}
	if got := out.String(); !strings.Contains(got, `level=WARN msg="redislock: lock lost" key=logged`) {
		t.Fatalf("slog.Default() got %q, want the lost lock", got)
	}
}
