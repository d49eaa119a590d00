package api

import (
	"bytes"
	"context"
	htmltemplate "html/template"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/web"
)

// The dashboard's sign-in: an admin asks for a one-time code (POST
// /v1/dashboard/codes, what `muster dashboard` does) and opens
// /dashboard/signin?code=…; the server swaps the code for a session cookie
// and redirects to /, so neither the admin token nor the code stays in the
// browser. Codes and sessions are random secrets kept only as hashes, in
// memory: a restarted controller forgets them and the user signs in again.
const (
	// DashboardCodeTTL is how long a sign-in code may be used (once).
	DashboardCodeTTL = 5 * time.Minute
	// DashboardSessionTTL is how long a dashboard session lasts.
	DashboardSessionTTL = 12 * time.Hour
	// DashboardCookie names the session cookie. The __Host- prefix makes
	// browsers insist on Secure, Path=/ and no Domain.
	DashboardCookie = "__Host-muster-session"
	// DashboardSigninPath is where a sign-in code is exchanged.
	DashboardSigninPath = "/dashboard/signin"

	// maxDashboardSecrets bounds the codes and sessions held in memory.
	maxDashboardSecrets = 10000
)

// DashboardCode is the answer to POST /v1/dashboard/codes.
type DashboardCode struct {
	Code    string    `json:"code"`
	Expires time.Time `json:"expires"`
}

// secretSet holds hashes of short-lived secrets with their expiry.
type secretSet struct {
	mu sync.Mutex
	m  map[string]time.Time // hash → expiry
}

// add stores hash until exp, dropping expired entries first; false when
// the set is full.
func (s *secretSet) add(hash string, exp, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]time.Time{}
	}
	for h, e := range s.m {
		if !now.Before(e) {
			delete(s.m, h)
		}
	}
	if len(s.m) >= maxDashboardSecrets {
		return false
	}
	s.m[hash] = exp
	return true
}

// valid reports whether secret is held and unexpired; with take it is
// also removed (used up).
func (s *secretSet) valid(secret string, now time.Time, take bool) bool {
	if secret == "" {
		return false
	}
	h := muster.HashSecret(secret)
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.m[h]
	if !ok {
		return false
	}
	if take || !now.Before(exp) {
		delete(s.m, h)
	}
	return now.Before(exp)
}

func (s *secretSet) remove(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, muster.HashSecret(secret))
}

// dashboard is the server's sign-in state and parsed pages.
type dashboard struct {
	codes    secretSet
	sessions secretSet
	index    []byte
	signin   *htmltemplate.Template
}

func newDashboard() (*dashboard, error) {
	index, err := fs.ReadFile(web.Pages, "index.html")
	if err != nil {
		return nil, err
	}
	signin, err := htmltemplate.ParseFS(web.Pages, "signin.html")
	if err != nil {
		return nil, err
	}
	return &dashboard{index: index, signin: signin}, nil
}

// dashboardSession returns the session cookie of r and whether it is a
// live dashboard session.
func (s *Server) dashboardSession(r *http.Request) (string, bool) {
	c, err := r.Cookie(DashboardCookie)
	if err != nil {
		return "", false
	}
	return c.Value, s.dash.sessions.valid(c.Value, s.clock.Now(), false)
}

// sessionEnded reports whether the request was let in by a dashboard
// session that has since expired or signed out: long-lived event streams
// check it so that they do not outlive the session.
func (s *Server) sessionEnded(ctx context.Context) bool {
	p := principalOf(ctx)
	return p.dashboard && !s.dash.sessions.valid(p.session, s.clock.Now(), false)
}

// handleDashboardCode issues a one-time sign-in code (admin only).
func (s *Server) handleDashboardCode(w http.ResponseWriter, r *http.Request) error {
	code, hash := auth.NewToken()
	now := s.clock.Now()
	exp := now.Add(DashboardCodeTTL)
	if !s.dash.codes.add(hash, exp, now) {
		return muster.Errorf(muster.EUnavailable, "too many unused dashboard sign-in codes; try again in %s", DashboardCodeTTL)
	}
	s.logger.Info("dashboard sign-in code issued", "expires", exp)
	writeJSON(w, http.StatusCreated, DashboardCode{Code: code, Expires: exp})
	return nil
}

// securePage sets the headers of every dashboard page: no caching, no
// referrer (a sign-in URL never leaks), no framing, only our own scripts.
func securePage(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
}

// handleDashboardSignin swaps a one-time code for a session cookie and
// redirects to /, which drops the code from the address bar.
func (s *Server) handleDashboardSignin(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	now := s.clock.Now()
	if err := s.authFail.admit(r); err != nil {
		s.signinPage(w, http.StatusTooManyRequests, "Too many failed sign-ins from this address; try again later.")
		return
	}
	if !s.dash.codes.valid(code, now, true) {
		s.authFail.fail(r, "dashboard sign-in with an invalid code")
		s.signinPage(w, http.StatusUnauthorized, "This sign-in link is not valid: it has expired or was used already.")
		return
	}
	tok, hash := auth.NewToken()
	exp := now.Add(DashboardSessionTTL)
	if !s.dash.sessions.add(hash, exp, now) {
		s.signinPage(w, http.StatusServiceUnavailable, "Too many dashboard sessions are open; try again later.")
		return
	}
	s.logger.Info("dashboard signed in", "remote", r.RemoteAddr, "expires", exp)
	http.SetCookie(w, &http.Cookie{
		Name:     DashboardCookie,
		Value:    tok,
		Path:     "/",
		MaxAge:   int(DashboardSessionTTL / time.Second),
		HttpOnly: true,
		Secure:   true,
		SameSite: http.SameSiteStrictMode,
	})
	securePage(w.Header())
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// handleDashboardSignout ends the session. Only a same-origin page may
// ask (the cookie is SameSite=Strict too).
func (s *Server) handleDashboardSignout(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && o != "https://"+r.Host {
		s.fail(w, r, muster.Errorf(muster.EForbidden, "cross-origin sign-out refused"))
		return
	}
	if c, err := r.Cookie(DashboardCookie); err == nil {
		s.dash.sessions.remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: DashboardCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	securePage(w.Header())
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// handleDashboard serves the dashboard to a signed-in browser and the
// sign-in page, which holds no data, to anybody else. A ?code= is
// exchanged as at /dashboard/signin.
func (s *Server) handleDashboard(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("code") {
		s.handleDashboardSignin(w, r)
		return
	}
	if _, ok := s.dashboardSession(r); !ok {
		s.signinPage(w, http.StatusOK, "")
		return
	}
	securePage(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(s.dash.index)
}

func (s *Server) signinPage(w http.ResponseWriter, status int, problem string) {
	var buf bytes.Buffer
	if err := s.dash.signin.Execute(&buf, struct{ Problem string }{problem}); err != nil {
		s.logger.Error("render sign-in page", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	securePage(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// staticHandler serves the dashboard's assets; they hold no data, so no
// sign-in is needed.
func staticHandler() http.Handler {
	fsrv := http.StripPrefix("/static/", http.FileServerFS(web.Static))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		fsrv.ServeHTTP(w, r)
	})
}
