package warnlog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// captureDefault makes slog.Default write text records at every level to the
// returned buffer until the test ends.
func captureDefault(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

func TestWarningsReachTheDefaultLogger(t *testing.T) {
	log := New() // made before the program sets its default logger
	buf := captureDefault(t)
	log.Debug("debug record")
	log.Info("info record")
	log.Warn("warn record", "key", "k1")
	log.Error("error record")
	log.With("token", 7).WithGroup("g").Warn("grouped", "n", 1)
	out := buf.String()
	for _, want := range []string{"msg=\"warn record\" key=k1", "msg=\"error record\"", "msg=grouped token=7 g.n=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("default logger got %q, want %q in it", out, want)
		}
	}
	for _, dropped := range []string{"debug record", "info record"} {
		if strings.Contains(out, dropped) {
			t.Errorf("%q reached the default logger: %q", dropped, out)
		}
	}
	if log.Enabled(t.Context(), slog.LevelInfo) || !log.Enabled(t.Context(), slog.LevelWarn) {
		t.Error("enabled below Warn, or not at Warn")
	}
}

// A default logger that drops warnings is obeyed.
func TestDefaultLevelIsObeyed(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	New().Warn("warn record")
	if buf.Len() != 0 {
		t.Fatalf("a warning passed a default logger at Error: %q", buf.String())
	}
}
