package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
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
)

// errAuthBlocked marks a refusal of a source over its limit: status 429.
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
	start   time.Time
	n       int // failures in the window
	waiting int // credential checks being delayed
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

// newSessionToken returns a new agent session token and its hash. The
// token carries a MAC under the session key, so that once its session has
// ended (a newer login, a controller restart) it is told from a guess.
func (s *Server) newSessionToken() (token, hash string) {
	base, _ := auth.NewToken()
	token = base + "." + s.sessionMAC(base)
	return token, muster.HashSecret(token)
}

func (s *Server) sessionMAC(base string) string {
	mac := hmac.New(sha256.New, s.sessionKey)
	mac.Write([]byte("agent session\x00" + base))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
}

// endedSession reports whether tok is a session token this server (or a
// controller sharing its session key) made: a stale token, not a guess.
func (s *Server) endedSession(tok string) bool {
	i := strings.LastIndexByte(tok, '.')
	return i > 0 && hmac.Equal([]byte(tok[i+1:]), []byte(s.sessionMAC(tok[:i])))
}
