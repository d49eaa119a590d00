package api

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// Failed authentication (S9): every failure is logged through a throttled
// logger (a flood gives a few lines and a summary), and a source address
// with too many failures in a window is refused until the window ends, so
// tokens and passwords cannot be guessed at the speed of the network.
const (
	// authFailMax failures from one source within authFailWindow block it
	// for the rest of the window.
	authFailMax    = 10
	authFailWindow = time.Minute
	// authSourcesMax bounds the sources remembered; past it, ended windows
	// are swept.
	authSourcesMax = 10000
)

// errAuthBlocked marks a refusal of a blocked source: status 429.
type errAuthBlocked struct{ err *muster.Error }

func (e errAuthBlocked) Error() string { return e.err.Error() }
func (e errAuthBlocked) Unwrap() error { return e.err }

// authFailures counts failed authentications per source address. It is
// safe for concurrent use.
type authFailures struct {
	clock muster.Clock
	log   *slog.Logger // throttled

	mu      sync.Mutex
	sources map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

func newAuthFailures(clock muster.Clock, log *slog.Logger) *authFailures {
	return &authFailures{clock: clock, log: log, sources: map[string]*failWindow{}}
}

// source is the address a request came from, without its port.
func source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// check refuses a source that has used up its failures in the current
// window.
func (a *authFailures) check(r *http.Request) error {
	src := source(r)
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.sources[src]
	if f == nil || f.n < authFailMax {
		return nil
	}
	if end := f.start.Add(authFailWindow); now.Before(end) {
		return errAuthBlocked{muster.Errorf(muster.EUnauthorized,
			"too many failed authentications from %s: try again in %s", src, end.Sub(now).Round(time.Second))}
	}
	delete(a.sources, src)
	return nil
}

// fail records and logs a failed authentication.
func (a *authFailures) fail(r *http.Request, reason string) {
	src := source(r)
	now := a.clock.Now()
	a.mu.Lock()
	f := a.sources[src]
	if f == nil || !now.Before(f.start.Add(authFailWindow)) {
		if len(a.sources) >= authSourcesMax {
			a.sweep(now)
		}
		f = &failWindow{start: now}
		a.sources[src] = f
	}
	f.n++
	n := f.n
	a.mu.Unlock()
	a.log.Warn("authentication failed", "source", src, "method", r.Method, "path", r.URL.Path, "reason", reason)
	if n == authFailMax {
		a.log.Warn("source blocked after failed authentications", "source", src, "failures", n, "for", authFailWindow)
	}
}

// sweep forgets the sources whose window has ended; a.mu is held.
func (a *authFailures) sweep(now time.Time) {
	for src, f := range a.sources {
		if !now.Before(f.start.Add(authFailWindow)) {
			delete(a.sources, src)
		}
	}
}
