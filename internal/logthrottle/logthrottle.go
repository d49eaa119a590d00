// Package logthrottle keeps logs readable when something fails over and
// over: a slog.Handler that lets the first few records of each warning or
// error through per window and summarises the rest as one record
// ("… 3214 more like this in the last 10s"). Records below Warn pass
// untouched.
package logthrottle

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// Options configure a Handler.
type Options struct {
	Window time.Duration // default 10s
	Burst  int           // records of one kind let through per window; default 5
	Clock  muster.Clock  // default muster.SystemClock
}

// Handler throttles repeated warnings and errors. Two records are of one
// kind when they have the same level, message and logger attributes
// (those given to With, such as the model). It is safe for concurrent use.
type Handler struct {
	inner  slog.Handler
	prefix string // the logger attributes, part of the kind
	st     *state
}

type state struct {
	opts  Options
	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	h          slog.Handler // the handler to summarise with
	level      slog.Level
	msg        string
	start      time.Time // of the window
	n          int       // records in the window
	suppressed int
}

// New wraps inner.
func New(inner slog.Handler, o Options) *Handler {
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.Burst <= 0 {
		o.Burst = 5
	}
	if o.Clock == nil {
		o.Clock = muster.SystemClock
	}
	return &Handler{inner: inner, st: &state{opts: o, kinds: map[string]*kind{}}}
}

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range as {
		b.WriteString(a.String())
		b.WriteByte(' ')
	}
	return &Handler{inner: h.inner.WithAttrs(as), prefix: b.String(), st: h.st}
}

func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), prefix: h.prefix + name + ".", st: h.st}
}

// Handle passes r on unless its kind has used up its burst in the current
// window. Summaries of windows that have ended are written first.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.inner.Handle(ctx, r)
	}
	now := h.st.opts.Clock.Now()
	key := r.Level.String() + "\x00" + h.prefix + "\x00" + r.Message
	h.st.mu.Lock()
	due := h.st.takeEnded(now)
	k := h.st.kinds[key]
	if k == nil {
		k = &kind{h: h.inner, level: r.Level, msg: r.Message, start: now}
		h.st.kinds[key] = k
	}
	k.n++
	pass := k.n <= h.st.opts.Burst
	if !pass {
		k.suppressed++
	}
	h.st.mu.Unlock()
	h.st.write(ctx, due)
	if !pass {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

// Flush writes the summaries of every kind with suppressed records, ended
// window or not (call it before the program exits).
func (h *Handler) Flush(ctx context.Context) {
	h.st.mu.Lock()
	due := h.st.takeEnded(time.Time{})
	h.st.mu.Unlock()
	h.st.write(ctx, due)
}

type summary struct {
	k          kind
	suppressed int
	span       time.Duration
}

// takeEnded removes the kinds whose window ended by now (every kind when
// now is zero) and returns summaries of those that suppressed records.
// st.mu is held.
func (st *state) takeEnded(now time.Time) []summary {
	var out []summary
	for key, k := range st.kinds {
		end := k.start.Add(st.opts.Window)
		if !now.IsZero() && now.Before(end) {
			continue
		}
		delete(st.kinds, key)
		if k.suppressed > 0 {
			span := st.opts.Window
			if now.IsZero() {
				span = st.opts.Clock.Now().Sub(k.start)
			}
			out = append(out, summary{*k, k.suppressed, span})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k.start.Before(out[j].k.start) })
	return out
}

func (st *state) write(ctx context.Context, ss []summary) {
	for _, s := range ss {
		r := slog.NewRecord(st.opts.Clock.Now(), s.k.level,
			fmt.Sprintf("%s (… %d more like this in the last %s)", s.k.msg, s.suppressed, s.span.Round(time.Second)), 0)
		r.AddAttrs(slog.Int("suppressed", s.suppressed))
		s.k.h.Handle(ctx, r)
	}
}
