package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// browser sends requests as a browser would: no bearer token, the given
// session cookie, redirects not followed.
type browser struct {
	h      *harness
	hc     *http.Client
	cookie string
}

func (h *harness) browser(tb testing.TB) *browser {
	tb.Helper()
	hc := h.client(tb, "").HTTPClient()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{h: h, hc: hc}
}

func (b *browser) do(tb testing.TB, method, path string, hdr map[string]string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequest(method, b.h.ts.URL+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: api.DashboardCookie, Value: b.cookie})
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// code asks for a sign-in code with the admin token.
func (h *harness) code(tb testing.TB) string {
	tb.Helper()
	c, err := h.admin.DashboardCode(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// signin exchanges code and returns the response and the session cookie
// it set (nil when none).
func (b *browser) signin(tb testing.TB, path, code string) (*http.Response, *http.Cookie) {
	tb.Helper()
	resp, _ := b.do(tb, "GET", path+"?code="+url.QueryEscape(code), nil)
	for _, c := range resp.Cookies() {
		if c.Name == api.DashboardCookie {
			return resp, c
		}
	}
	return resp, nil
}

// signedIn returns a browser with a session.
func (h *harness) signedIn(tb testing.TB) *browser {
	tb.Helper()
	b := h.browser(tb)
	resp, c := b.signin(tb, api.DashboardSigninPath, h.code(tb))
	if c == nil {
		tb.Fatalf("sign-in: got status %d and no session cookie", resp.StatusCode)
	}
	b.cookie = c.Value
	return b
}

func TestDashboardSigninCookieAndOneUse(t *testing.T) {
	for _, path := range []string{api.DashboardSigninPath, "/"} {
		t.Run(path, func(t *testing.T) {
			h := newHarness(t)
			b := h.browser(t)
			code := h.code(t)
			resp, c := b.signin(t, path, code)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("got status %d, want %d", resp.StatusCode, http.StatusSeeOther)
			}
			if got := resp.Header.Get("Location"); got != "/" {
				t.Errorf("got Location %q, want %q (no code in the URL)", got, "/")
			}
			if got := resp.Header.Get("Referrer-Policy"); got != "no-referrer" {
				t.Errorf("got Referrer-Policy %q, want no-referrer", got)
			}
			if c == nil {
				t.Fatal("no session cookie set")
			}
			if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" {
				t.Errorf("got cookie HttpOnly=%v Secure=%v SameSite=%v Path=%q Domain=%q, want HttpOnly, Secure, Strict, Path=/, no Domain",
					c.HttpOnly, c.Secure, c.SameSite, c.Path, c.Domain)
			}
			if got, want := c.MaxAge, int(api.DashboardSessionTTL/time.Second); got != want {
				t.Errorf("got Max-Age %d, want %d", got, want)
			}
			if c.Value == "" || strings.Contains(c.Value, code) || strings.Contains(c.Value, h.token) {
				t.Errorf("session cookie %q is empty or carries the code or token", c.Value)
			}

			// The code works once.
			resp, c2 := b.signin(t, path, code)
			if resp.StatusCode != http.StatusUnauthorized || c2 != nil {
				t.Errorf("second use: got status %d cookie %v, want 401 and no cookie", resp.StatusCode, c2)
			}
			// The session from the first use works.
			b.cookie = c.Value
			if resp, _ := b.do(t, "GET", "/v1/models", nil); resp.StatusCode != 200 {
				t.Errorf("with session: got status %d, want 200", resp.StatusCode)
			}
		})
	}
}

func TestDashboardCodeExpiry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		want  int
	}{
		{"fresh", 0, http.StatusSeeOther},
		{"just before expiry", api.DashboardCodeTTL - time.Second, http.StatusSeeOther},
		{"at expiry", api.DashboardCodeTTL, http.StatusUnauthorized},
		{"long after", time.Hour, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			code := h.code(t)
			h.clock.Advance(tc.after)
			resp, c := h.browser(t).signin(t, api.DashboardSigninPath, code)
			if resp.StatusCode != tc.want {
				t.Errorf("got status %d, want %d", resp.StatusCode, tc.want)
			}
			if (c != nil) != (tc.want == http.StatusSeeOther) {
				t.Errorf("got cookie %v, want one only on success", c)
			}
		})
	}
}

func TestDashboardSigninRefusesBadCodes(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ name, code string }{
		{"empty", ""},
		{"random", muster.NewSecret()},
		{"admin token", h.token},
		{"junk", "<script>alert(1)</script>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := h.browser(t)
			resp, c := b.signin(t, api.DashboardSigninPath, tc.code)
			if resp.StatusCode != http.StatusUnauthorized || c != nil {
				t.Errorf("got status %d cookie %v, want 401 and no cookie", resp.StatusCode, c)
			}
		})
	}
	// The refusal page does not echo the code.
	_, body := h.browser(t).do(t, "GET", api.DashboardSigninPath+"?code=%3Cscript%3Ealert(1)%3C/script%3E", nil)
	if strings.Contains(body, "<script>alert") {
		t.Errorf("refusal page echoes the code: %s", body)
	}
}

func TestDashboardSessionExpires(t *testing.T) {
	h := newHarness(t)
	b := h.signedIn(t)
	h.clock.Advance(api.DashboardSessionTTL - time.Minute)
	if resp, _ := b.do(t, "GET", "/v1/models", nil); resp.StatusCode != 200 {
		t.Fatalf("before expiry: got status %d, want 200", resp.StatusCode)
	}
	h.clock.Advance(time.Minute)
	if resp, _ := b.do(t, "GET", "/v1/models", nil); resp.StatusCode != 401 {
		t.Errorf("after expiry: got status %d, want 401", resp.StatusCode)
	}
}

func TestDashboardCodeNeedsAdminToken(t *testing.T) {
	h := newHarness(t)
	b := h.signedIn(t)
	for _, tc := range []struct {
		name  string
		call  func() (int, string)
		want  int
		wantC string
	}{
		{"no token", func() (int, string) { return h.raw(t, "POST", "/v1/dashboard/codes", "", nil) }, 401, muster.EUnauthorized},
		{"wrong token", func() (int, string) { return h.raw(t, "POST", "/v1/dashboard/codes", muster.NewSecret(), nil) }, 401, muster.EUnauthorized},
		{"session cookie", func() (int, string) {
			resp, _ := b.do(t, "POST", "/v1/dashboard/codes", nil)
			return resp.StatusCode, ""
		}, 401, ""},
		{"admin", func() (int, string) { return h.raw(t, "POST", "/v1/dashboard/codes", h.token, nil) }, 201, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := tc.call()
			if got != tc.want || (tc.wantC != "" && code != tc.wantC) {
				t.Errorf("got %d %q, want %d %q", got, code, tc.want, tc.wantC)
			}
		})
	}
}

// TestDashboardCookieRoutes: the cookie opens the read-only routes the
// dashboard uses and nothing else; without it they are refused.
func TestDashboardCookieRoutes(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	b := h.signedIn(t)
	anon := h.browser(t)
	forged := h.browser(t)
	forged.cookie = muster.NewSecret()
	for _, tc := range []struct {
		method, path string
		withCookie   int
	}{
		{"GET", "/v1/models", 200},
		{"GET", "/v1/models/default/status", 200},
		{"GET", "/v1/models/default/status?machines=0", 200},
		{"GET", "/v1/models/default/machines/0", 200},
		{"GET", "/v1/models/default/events", 200},
		{"GET", "/v1/models/default/zones", 200},
		// Mutating routes never take the cookie (CSRF).
		{"POST", "/v1/models", 401},
		{"DELETE", "/v1/models/default", 401},
		{"PATCH", "/v1/models/default/config", 401},
		{"POST", "/v1/models/default/machines", 401},
		{"POST", "/v1/models/default/remove-machines", 401},
		{"POST", "/v1/models/default/retry-provisioning", 401},
		{"POST", "/v1/models/default/apply", 401},
		{"POST", "/v1/dashboard/codes", 401},
		// Nor do reads the dashboard does not need.
		{"GET", "/v1/models/default", 401},
		{"GET", "/v1/models/default/config", 401},
		{"GET", "/v1/models/default/sim/zones", 401},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			if resp, body := b.do(t, tc.method, tc.path, nil); resp.StatusCode != tc.withCookie {
				t.Errorf("with cookie: got %d, want %d (%s)", resp.StatusCode, tc.withCookie, body)
			}
			for name, br := range map[string]*browser{"no cookie": anon, "forged cookie": forged} {
				if resp, _ := br.do(t, tc.method, tc.path, nil); resp.StatusCode != 401 {
					t.Errorf("%s: got %d, want 401", name, resp.StatusCode)
				}
			}
		})
	}
	if got := h.machines(t); len(got) != 2 {
		t.Errorf("got %d machines after refused calls, want 2", len(got))
	}
}

func TestDashboardCookieOpensEventStream(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{})
	for _, tc := range []struct {
		name   string
		cookie bool
		want   int
	}{
		{"cookie", true, 200},
		{"no cookie", false, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := h.browser(t)
			if tc.cookie {
				b = h.signedIn(t)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", h.ts.URL+"/v1/models/default/events/stream", nil)
			if b.cookie != "" {
				req.AddCookie(&http.Cookie{Name: api.DashboardCookie, Value: b.cookie})
			}
			resp, err := b.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("got status %d, want %d", resp.StatusCode, tc.want)
			}
			if tc.want != 200 {
				return
			}
			// The backlog holds the add-machine event of machine 0.
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var e api.EventInfo
					if err := json.Unmarshal([]byte(data), &e); err != nil {
						t.Fatal(err)
					}
					if e.Kind != "add-machine" || e.Machine != "0" {
						t.Errorf("got event %+v, want add-machine of 0", e)
					}
					return
				}
			}
			t.Fatalf("stream ended without an event: %v", sc.Err())
		})
	}
}

func TestDashboardPage(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{Count: 1, Constraints: "cores=7", Group: "secretgroup"})
	signed := h.signedIn(t)
	forged := h.browser(t)
	forged.cookie = muster.NewSecret()
	for _, tc := range []struct {
		name      string
		b         *browser
		wantApp   bool
		wantInPge string
	}{
		{"no session", h.browser(t), false, "muster dashboard"},
		{"forged session", forged, false, "muster dashboard"},
		{"session", signed, true, "/static/app.js"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := tc.b.do(t, "GET", "/", nil)
			if resp.StatusCode != 200 {
				t.Fatalf("got status %d, want 200", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Errorf("got Content-Type %q, want text/html", ct)
			}
			if !strings.Contains(body, tc.wantInPge) {
				t.Errorf("page lacks %q", tc.wantInPge)
			}
			if got := strings.Contains(body, "app.js"); got != tc.wantApp {
				t.Errorf("page loads app.js: got %v, want %v", got, tc.wantApp)
			}
			for _, secret := range []string{"secretgroup", "cores=7", h.model.UUID, h.token} {
				if strings.Contains(body, secret) {
					t.Errorf("page shows %q", secret)
				}
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("got CSP %q, want script-src 'self'", csp)
			}
		})
	}
	if resp, _ := signed.do(t, "GET", "/nothing", nil); resp.StatusCode != 404 {
		t.Errorf("unknown path: got %d, want 404", resp.StatusCode)
	}
}

func TestDashboardStatic(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		path   string
		status int
		ctype  string
	}{
		{"/static/app.js", 200, "javascript"},
		{"/static/style.css", 200, "text/css"},
		{"/static/icon.svg", 200, "image/svg+xml"},
		{"/static/missing.js", 404, ""},
		{"/static/../index.html", 404, ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, _ := h.browser(t).do(t, "GET", tc.path, nil)
			if resp.StatusCode != tc.status && !(tc.status == 404 && resp.StatusCode >= 300 && resp.StatusCode < 400) {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.status)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, tc.ctype) {
				t.Errorf("got Content-Type %q, want %q", ct, tc.ctype)
			}
		})
	}
}

func TestDashboardSignout(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name       string
		origin     string
		wantStatus int
		wantValid  bool
	}{
		{"same origin", "", http.StatusSeeOther, false},
		{"other origin", "https://evil.example", http.StatusForbidden, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := h.signedIn(t)
			hdr := map[string]string{}
			if tc.origin != "" {
				hdr["Origin"] = tc.origin
			} else {
				hdr["Origin"] = h.ts.URL
			}
			resp, _ := b.do(t, "POST", "/dashboard/signout", hdr)
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("got status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			resp, _ = b.do(t, "GET", "/v1/models", nil)
			if got := resp.StatusCode == 200; got != tc.wantValid {
				t.Errorf("session valid after sign-out: got %v, want %v", got, tc.wantValid)
			}
		})
	}
}

func TestStatusMachinesFilter(t *testing.T) {
	h := newHarness(t, withRuntime(&testRuntime{zones: func(context.Context, string) ([]api.ZoneInfo, error) {
		return []api.ZoneInfo{{Name: "a", Available: true}, {Name: "b", Available: true, Machines: 1}}, nil
	}}))
	h.addMachines(t, api.AddMachinesRequest{Count: 4})
	h.provision(t, "2", "b")
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		ids       []string
		want      []string
		wantZones map[string]int
	}{
		{"some", []string{"0", "2"}, []string{"0", "2"}, map[string]int{"b": 1}},
		{"missing ids are left out", []string{"1", "9"}, []string{"1"}, map[string]int{}},
		{"duplicates", []string{"3", "3"}, []string{"3"}, map[string]int{}},
		{"none", []string{}, []string{}, map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := h.admin.MachinesStatus(ctx, "default", tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for id := range st.Machines {
				got = append(got, id)
			}
			sort.Strings(got)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got machines %v, want %v", got, tc.want)
			}
			if st.Model != "default" || st.HarvestMode == "" || st.Machines == nil || st.Zones == nil {
				t.Errorf("got status %+v, want the full shape", st)
			}
			for z, n := range tc.wantZones {
				if st.Zones[z].Machines != n {
					t.Errorf("zone %s: got %d machines, want %d", z, st.Zones[z].Machines, n)
				}
			}
			if m, ok := st.Machines["2"]; ok && (m.InstanceID != "i-2" || m.Zone != "b") {
				t.Errorf("machine 2: got %+v, want instance i-2 in b", m)
			}
		})
	}
	for _, tc := range []struct{ name, query string }{
		{"bad id", "machines=0,x"},
		{"negative", "machines=-1"},
		{"too many", "machines=" + numbers(api.MaxStatusMachines+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, code := h.raw(t, "GET", "/v1/models/default/status?"+tc.query, h.token, nil)
			if status != 400 || code != muster.EInvalid {
				t.Errorf("got %d %q, want 400 invalid", status, code)
			}
		})
	}
}

func numbers(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return strings.Join(ids, ",")
}

func TestDashboardURL(t *testing.T) {
	h := newHarness(t)
	u, err := h.admin.DashboardURL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	prefix := h.ts.URL + api.DashboardSigninPath + "?code="
	if !strings.HasPrefix(u, prefix) || len(u) <= len(prefix) {
		t.Fatalf("got %q, want %s<code>", u, prefix)
	}
	if strings.Contains(u, h.token) {
		t.Errorf("dashboard URL %q carries the admin token", u)
	}
	pu, _ := url.Parse(u)
	resp, c := h.browser(t).signin(t, api.DashboardSigninPath, pu.Query().Get("code"))
	if resp.StatusCode != http.StatusSeeOther || c == nil {
		t.Errorf("signing in with the URL's code: got %d cookie %v, want 303 and a cookie", resp.StatusCode, c)
	}
	if _, err := h.anon.DashboardURL(context.Background()); muster.ErrorCode(err) != muster.EUnauthorized {
		t.Errorf("without a token: got %v, want unauthorized", err)
	}
}

// TestDashboardStreamEndsWithSession: an event stream opened with the
// session cookie ends at the next keepalive once the session is over.
func TestDashboardStreamEndsWithSession(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     func(h *harness, b *browser)
		wantEnd bool
	}{
		{"still signed in", func(*harness, *browser) {}, false},
		{"signed out", func(h *harness, b *browser) {
			b.do(t, "POST", "/dashboard/signout", map[string]string{"Origin": h.ts.URL})
		}, true},
		{"expired", func(h *harness, _ *browser) { h.clock.Advance(api.DashboardSessionTTL) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			b := h.signedIn(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", h.ts.URL+"/v1/models/default/events/stream", nil)
			req.AddCookie(&http.Cookie{Name: api.DashboardCookie, Value: b.cookie})
			resp, err := b.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("got status %d, want 200", resp.StatusCode)
			}
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					select {
					case lines <- sc.Text():
					case <-ctx.Done():
						return
					}
				}
			}()
			tc.end(h, b)
			// Keepalives come as the fake clock moves; the deadline only
			// guards against a hang.
			deadline := time.After(10 * time.Second)
			for {
				h.clock.Advance(api.StreamKeepalive)
				select {
				case l, ok := <-lines:
					if !ok {
						if !tc.wantEnd {
							t.Fatal("stream ended while the session lives")
						}
						return
					}
					if l == ": keepalive" && !tc.wantEnd {
						return
					}
				case <-deadline:
					t.Fatalf("timed out; want the stream to end: %v", tc.wantEnd)
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
}
