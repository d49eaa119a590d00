package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// TestDashboardInBrowser drives Debian's chromium headless against a real
// API server (TLS, SQLite store): sign-in with a one-time code, tiles of
// machines added through the API appearing without a reload, a machine
// turning to provisioning error with its message, the details dialog, the
// code refused a second time and a request without the cookie refused.
// Screenshots go to $MUSTER_ARTIFACTS (else a temporary directory).
func TestDashboardInBrowser(t *testing.T) {
	if os.Getenv("MUSTER_TEST_BROWSER") != "1" {
		t.Skip("set MUSTER_TEST_BROWSER=1 to run the dashboard in headless chromium (Debian package chromium)")
	}
	chrome := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			chrome = p
			break
		}
	}
	if chrome == "" {
		t.Fatal("MUSTER_TEST_BROWSER=1 but no chromium found: apt-get install chromium")
	}
	artefacts := os.Getenv("MUSTER_ARTIFACTS")
	if artefacts == "" {
		artefacts = t.TempDir()
	}
	if err := os.MkdirAll(artefacts, 0o755); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, func(c *api.Config) {
		c.Zones = func(context.Context, string) ([]muster.Zone, error) {
			return []muster.Zone{{Name: "a", Available: true}, {Name: "b", Available: true}, {Name: "c", Available: true}, {Name: "d"}}, nil
		}
	})
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 3, Group: "web", Constraints: "cores=2 mem=4G"})
	h.provision(t, "0", "a")

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // root in CI containers
		// The test CA is trusted by this browser only.
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	// Guards the whole run against a hang; no timing is asserted.
	bctx, cancelTimeout := context.WithTimeout(bctx, 2*time.Minute)
	defer cancelTimeout()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string { return runB(t, bctx, "text of "+sel, chromedp.Text(chromedp.CSS(sel))) }
	tile := func(id string) string { return `#zones .tile[data-id="` + id + `"]` }
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	shot := func(name string) {
		t.Helper()
		png := runB(t, bctx, "screenshot "+name, chromedp.FullScreenshot(100))
		p := filepath.Join(artefacts, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}

	// Without a session, / shows only the sign-in page.
	do("open / without a session", chromedp.Navigate(h.ts.URL+"/"), visible(`.signin-box`))
	if body := text(`body`); !strings.Contains(body, "muster dashboard") || strings.Contains(body, "web") {
		t.Errorf("sign-in page: got %q, want the sign-in text and no machine data", body)
	}

	// Sign in with a one-time code.
	code := h.code(t)
	do("sign in", chromedp.Navigate(h.ts.URL+api.DashboardSigninPath+"?code="+code), visible(tile("2")))
	if loc := runB(t, bctx, "location", chromedp.Location()); strings.Contains(loc, code) || !strings.HasPrefix(loc, h.ts.URL+"/") {
		t.Errorf("after sign-in the address is %q, want the dashboard without the code", loc)
	}
	if c := runB(t, bctx, "document.cookie", chromedp.Evaluate[string](`document.cookie`)); c != "" {
		t.Errorf("page script sees cookie %q, want none (HttpOnly)", c)
	}
	if st := runB(t, bctx, "state of 0", chromedp.AttributeValue(chromedp.CSS(tile("0")), "data-state")); st.Value != "running" {
		t.Errorf("machine 0: got state %q, want running", st.Value)
	}

	// Machines added through the API appear without a reload.
	do("mark the page", chromedp.Evaluate[chromedp.Void](`window.musterMark = 42`))
	h.addMachines(t, api.AddMachinesRequest{Count: 2, Group: "db"})
	do("new tiles", visible(tile("4")))
	if tt := text(tile("4")); !strings.Contains(tt, "4") || !strings.Contains(tt, "db") || !strings.Contains(tt, "pending") {
		t.Errorf("tile 4: got %q, want id, group and state label", tt)
	}
	if mark := runB(t, bctx, "mark", chromedp.Evaluate[int](`window.musterMark || 0`)); mark != 42 {
		t.Errorf("the page was reloaded (mark %d)", mark)
	}

	// Machines move on: one started, one allocating, one fails.
	const failure = "suitable availability zone for machine 1 not found"
	h.provision(t, "2", "b")
	h.provision(t, "3", "c")
	if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{
		{ID: "1", InstanceStatus: muster.Ptr(muster.InstanceProvisioningError), InstanceMessage: muster.Ptr(failure)},
		{ID: "2", Status: muster.Ptr(muster.StatusStarted)},
		{ID: "4", InstanceStatus: muster.Ptr(muster.InstanceAllocating), InstanceMessage: muster.Ptr("starting")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.AppendEvents(ctx, []muster.Event{{ModelUUID: h.model.UUID, MachineID: "1", Actor: "provisioner", Kind: "provisioning-error", Message: failure}}); err != nil {
		t.Fatal(err)
	}
	do("machines move on",
		visible(tile("1")+`[data-state="perror"]`),
		visible(tile("2")+`[data-state="started"]`),
		visible(tile("4")+`[data-state="allocating"]`),
		visible(`#events li`))
	if tt := text(tile("1")); !strings.Contains(tt, "provisioning error") {
		t.Errorf("tile 1: got %q, want the text label provisioning error", tt)
	}
	runB(t, bctx, "feed shows the failure", chromedp.Poll[bool](`document.getElementById('events').textContent.includes(`+jsString(failure)+`)`))
	if p := text(`#progress-text`); p != "3 of 5 machines running (60%)" {
		t.Errorf("got progress %q, want 3 of 5 machines running (60%%)", p)
	}
	shot("dashboard.png")

	// Details of the failed machine show its message and its timeline.
	do("details of machine 1", chromedp.Click(chromedp.CSS(tile("1"))), visible(`#details .timeline`))
	details := text(`#details`)
	for _, want := range []string{"Machine 1", failure, "cores=2 mem=4G", "web", "add-machine", "provisioning-error"} {
		if !strings.Contains(details, want) {
			t.Errorf("details lack %q: %q", want, details)
		}
	}
	shot("dashboard-details.png")
	do("close details", chromedp.Click(chromedp.CSS(`#d-close`)), chromedp.WaitNotVisible(chromedp.CSS(`#details`)))

	// A request without the cookie is refused, with it accepted, and the
	// cookie never opens a mutating route.
	statuses := runB(t, bctx, "fetch with and without cookie", chromedp.Evaluate[[]int](`Promise.all([
		fetch('/v1/models/default/status', {credentials: 'omit'}).then(r => r.status),
		fetch('/v1/models/default/status', {credentials: 'same-origin'}).then(r => r.status),
		fetch('/v1/models/default/machines', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/json'}, body: '{}'}).then(r => r.status),
	])`, chromedp.EvalAwaitPromise))
	if len(statuses) != 3 || statuses[0] != 401 || statuses[1] != 200 || statuses[2] != 401 {
		t.Errorf("got statuses %v, want [401 200 401] (no cookie, cookie, cookie on a mutating route)", statuses)
	}
	if got := len(h.machines(t)); got != 5 {
		t.Errorf("got %d machines, want 5", got)
	}
	resp, err := h.client(t, "").HTTPClient().Get(h.ts.URL + "/v1/models/default/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status without cookie: got %d, want 401", resp.StatusCode)
	}

	// Phone width: everything fits, no sideways scrolling.
	do("phone width", chromedp.EmulateViewport(390, 844))
	runB(t, bctx, "phone layout", chromedp.Poll[bool](`window.innerWidth === 390`))
	if runB(t, bctx, "overflow", chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)) {
		t.Errorf("at 390px the page scrolls sideways")
	}
	shot("dashboard-phone.png")

	// The code does not work twice.
	do("reuse the code", chromedp.Navigate(h.ts.URL+api.DashboardSigninPath+"?code="+code), visible(`.problem`))
	if p := text(`.problem`); !strings.Contains(p, "not valid") {
		t.Errorf("second use of the code: got %q, want a refusal", p)
	}
}

// runB runs one browser action and fails the test on error.
func runB[T any](tb testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	tb.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	return v
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
