package warnlog

import (
	"context"
	"log/slog"
	"slices"
)

// New returns a logger that passes records at slog.LevelWarn and above to the
// handler of slog.Default() and drops the others. The default handler is
// looked up for each record, so a program that calls slog.SetDefault after
// making a Locker or a Guard still gets their warnings where it wants them.
func New() *slog.Logger { return slog.New(handler{}) }

// handler forwards to slog.Default().Handler() the records at Warn and above,
// with the attributes and groups added through it.
type handler struct {
	with []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (h handler) target() slog.Handler {
	t := slog.Default().Handler()
	for _, w := range h.with {
		t = w(t)
	}
	return t
}

// Enabled is false below Warn, without asking the default handler: the debug
// records of a busy caller cost nothing.
func (h handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slog.Default().Handler().Enabled(ctx, l)
}

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	return h.target().Handle(ctx, r)
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return handler{with: append(slices.Clip(h.with), func(t slog.Handler) slog.Handler { return t.WithAttrs(attrs) })}
}

func (h handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return handler{with: append(slices.Clip(h.with), func(t slog.Handler) slog.Handler { return t.WithGroup(name) })}
}
