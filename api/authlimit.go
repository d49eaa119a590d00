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
// logger (a flood gives a few lines and a summary) and counted per source
// address. A source with authFailMax failures in its window has every
// credential check delayed by authFailDelay until the window ends, at most
// authDelayMax at a time; more are refused at once with 429. A delayed
// check of a good credential succeeds, so agents sharing an address with
// a guesser are slowed, not locked out; other sources are not touched.
const (
	authFailMax    = 20
	authFailWindow = time.Minute
	authFailDelay  = time.Second
	authDelayMax   = 8
	// authSourcesMax bounds the sources remembered; past it, ended windows
	// are swept.
	authSourcesMax = 10000
	// retiredMax is how many ended agent sessions are remembered: their
	// tokens are stale, not guesses, and are not counted as failures.
	retiredMax = 4096
)

// errAuthBlocked marks a refusal of a source over its limit: status 429.
type errAuthBlocked struct{ err *muster.Error }

func (e errAuthBlocked) Error() string { return e.err.Error() }
func (e errAuthBlocked) Unwrap() error { return e.err }

// authFailures counts failed authentications per source address. It is
// safe for concurrent use; a nil *authFailures does nothing.
type authFailures struct {
	clock muster.Clock
	log   *slog.Logger // throttled

	mu          sync.Mutex
	sources     map[string]*failWindow
	retired     map[string]bool // token hashes of ended agent sessions
	retiredRing []string
	retiredNext int
}

type failWindow struct {
	start   time.Time
	n       int // failures in the window
	waiting int // credential checks being delayed
}

func newAuthFailures(clock muster.Clock, log *slog.Logger) *authFailures {
	return &authFailures{clock: clock, log: log, sources: map[string]*failWindow{},
		retired: map[string]bool{}, retiredRing: make([]string, retiredMax)}
}

// source is the address a request came from, without its port.
func source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// window returns src's current window, nil when it has none or it ended;
// a.mu is held.
func (a *authFailures) window(src string, now time.Time) *failWindow {
	f := a.sources[src]
	if f != nil && !now.Before(f.start.Add(authFailWindow)) && f.waiting == 0 {
		delete(a.sources, src)
		return nil
	}
	return f
}

// admit is called before a request's credentials are checked: at once
// for a source under its limit, else after authFailDelay on the clock, or
// an error when authDelayMax checks of the source already wait.
func (a *authFailures) admit(r *http.Request) error {
	src := source(r)
	now := a.clock.Now()
	a.mu.Lock()
	f := a.window(src, now)
	if f == nil || f.n < authFailMax || !now.Before(f.start.Add(authFailWindow)) {
		a.mu.Unlock()
		return nil
	}
	if f.waiting >= authDelayMax {
		left := f.start.Add(authFailWindow).Sub(now).Round(time.Second)
		a.mu.Unlock()
		return errAuthBlocked{muster.Errorf(muster.EUnauthorized,
			"too many failed authentications from %s: try again in %s", src, left)}
	}
	f.waiting++
	// The timer starts under the lock: once a check is refused for the
	// waiting ones, their timers run.
	delay := a.clock.After(authFailDelay)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		f.waiting--
		a.mu.Unlock()
	}()
	select {
	case <-delay:
		return nil
	case <-r.Context().Done():
		return muster.Errorf(muster.EUnavailable, "request cancelled")
	}
}

// fail records and logs a failed authentication.
func (a *authFailures) fail(r *http.Request, reason string) {
	src := source(r)
	now := a.clock.Now()
	a.mu.Lock()
	f := a.window(src, now)
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
		a.log.Warn("failed authentications from a source: its requests are slowed", "source", src, "failures", n, "until", f.start.Add(authFailWindow))
	}
}

// sweep forgets the sources whose window has ended; a.mu is held.
func (a *authFailures) sweep(now time.Time) {
	for src, f := range a.sources {
		if !now.Before(f.start.Add(authFailWindow)) && f.waiting == 0 {
			delete(a.sources, src)
		}
	}
}

// retire remembers the token hash of an ended agent session.
func (a *authFailures) retire(hash string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.retiredRing[a.retiredNext]; old != "" {
		delete(a.retired, old)
	}
	a.retiredRing[a.retiredNext] = hash
	a.retired[hash] = true
	a.retiredNext = (a.retiredNext + 1) % len(a.retiredRing)
}

// isRetired reports whether hash is the token of a recently ended session.
func (a *authFailures) isRetired(hash string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.retired[hash]
}
