package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
)

func TestDashboardCmd(t *testing.T) {
	tc := startController(t, "")
	cc, err := controller.LoadClientConfig(tc.config)
	if err != nil {
		t.Fatal(err)
	}
	// A browser: trusts the CA, has no token, does not follow redirects.
	anon, err := api.NewClient(api.ClientConfig{URL: tc.ctrl.URL(), CACert: []byte(cc.CACert)})
	if err != nil {
		t.Fatal(err)
	}
	browser := anon.HTTPClient()
	browser.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(u string, cookie *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	out := tc.ok("dashboard")
	u := strings.TrimSpace(out)
	if strings.Count(out, "\n") != 1 || !strings.HasPrefix(u, tc.ctrl.URL()+api.DashboardSigninPath+"?code=") {
		t.Fatalf("got %q, want one line %s%s?code=…", out, tc.ctrl.URL(), api.DashboardSigninPath)
	}
	if strings.Contains(u, cc.Token) {
		t.Fatalf("dashboard URL carries the admin token")
	}
	resp, _ := get(u, nil)
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == api.DashboardCookie {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil {
		t.Fatalf("opening the URL: got %d, cookie %v; want 303 and a session cookie", resp.StatusCode, session)
	}
	if _, page := get(tc.ctrl.URL()+"/", session); !strings.Contains(page, "/static/app.js") {
		t.Errorf("/ with the session is not the dashboard: %.200q", page)
	}
	if _, page := get(tc.ctrl.URL()+"/", nil); strings.Contains(page, "app.js") || !strings.Contains(page, "muster dashboard") {
		t.Errorf("/ without a session is not the sign-in page: %.200q", page)
	}
	if resp, _ := get(u, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("opening the URL twice: got %d, want 401", resp.StatusCode)
	}

	// Another model is carried in the fragment, for the page's picker.
	tc.ok("add-model", "other", "--provider", "sim")
	if out := tc.ok("dashboard", "-m", "other"); !strings.HasSuffix(strings.TrimSpace(out), "#model=other") {
		t.Errorf("dashboard -m other: got %q, want …#model=other", out)
	}
}
