package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	bctx, h := startBrowser(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 3, Group: "web", Constraints: "cores=2 mem=4G"})
	h.provision(t, "0", "a")

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string { return runB(t, bctx, "text of "+sel, chromedp.Text(chromedp.CSS(sel))) }
	tile := func(id string) string { return `#zones .tile[data-id="` + id + `"]` }
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	shot := func(name string) { shot(t, bctx, name) }

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

	// A sign-in URL that names a model in its fragment opens that model.
	if _, err := h.store.CreateModel(ctx, muster.Model{Name: "other", Provider: "sim", Settings: muster.DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	do("sign in to another model", chromedp.Navigate(h.ts.URL+api.DashboardSigninPath+"?code="+h.code(t)+"#model=other"))
	runB(t, bctx, "model other shown", chromedp.Poll[bool](`document.getElementById('f-model').textContent === 'other' &&
		document.getElementById('model').value === 'other' && location.hash === '#model=other' &&
		document.getElementById('progress-text').textContent === 'No machines yet'`))

	// The code does not work twice.
	do("reuse the code", chromedp.Navigate(h.ts.URL+api.DashboardSigninPath+"?code="+code), visible(`.problem`))
	if p := text(`.problem`); !strings.Contains(p, "not valid") {
		t.Errorf("second use of the code: got %q, want a refusal", p)
	}
}

// dashTileCap is TILE_CAP of web/static/app.js: tiles drawn per column.
const dashTileCap = 300

// startBrowser starts an API server (zones a, b, c available, d not) and a
// headless chromium for it, or skips without MUSTER_TEST_BROWSER=1.
func startBrowser(t *testing.T) (context.Context, *harness) {
	t.Helper()
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
	h := newHarness(t, withRuntime(&testRuntime{zones: func(context.Context, string) ([]api.ZoneInfo, error) {
		return []api.ZoneInfo{{Name: "a", Available: true}, {Name: "b", Available: true}, {Name: "c", Available: true}, {Name: "d"}}, nil
	}}))
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // root in CI containers
		// The test CA is trusted by this browser only.
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	// Start the browser now, on a context without a deadline.
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	// The deadline guards the run against a hang; no timing is asserted.
	tctx, cancelTimeout := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser()
		cancelAlloc()
	})
	return tctx, h
}

// shot saves a screenshot of the whole page to $MUSTER_ARTIFACTS, else to
// a temporary directory.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("MUSTER_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png := runB(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
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

// TestDashboardInBrowserLargeFleet loads a 10,000-machine model: the page
// shows exact counts while it draws at most dashTileCap tiles per zone
// column and says how many it left out. Load and frame times are logged,
// not asserted.
func TestDashboardInBrowserLargeFleet(t *testing.T) {
	setup := time.Now()
	bctx, h := startBrowser(t)
	ctx := context.Background()
	const n, placed = 10000, 6000
	// Straight into the store: through the API the 10,000 add-machine
	// events make the setup slow under the race detector.
	ts := make([]muster.MachineTemplate, n)
	for i := range ts {
		ts[i] = muster.MachineTemplate{Group: "fleet", Base: muster.DefaultBase}
	}
	if _, err := h.store.AddMachines(ctx, h.model.UUID, ts); err != nil {
		t.Fatal(err)
	}
	us := make([]muster.MachineUpdate, placed)
	rs := make([]muster.InstanceRecord, placed)
	for i := range placed {
		id, nonce := strconv.Itoa(i), "machine-0:"+muster.NewUUID()
		us[i] = muster.MachineUpdate{ID: id, Nonce: muster.Ptr(nonce)}
		rs[i] = muster.InstanceRecord{MachineID: id, Nonce: nonce, Info: muster.InstanceInfo{InstanceID: "i-" + id, Zone: string(rune('a' + i%3))}}
	}
	if err := h.store.UpdateMachines(ctx, h.model.UUID, us); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.RecordInstances(ctx, h.model.UUID, rs); err != nil {
		t.Fatal(err)
	}

	t.Logf("setup took %v", time.Since(setup))
	began := time.Now()
	runB(t, bctx, "sign in", chromedp.Navigate(h.ts.URL+api.DashboardSigninPath+"?code="+h.code(t)))
	runB(t, bctx, "all machines counted", chromedp.Poll[bool](`document.getElementById('f-machines').textContent === '10000'`))
	t.Logf("10,000 machines loaded and drawn in %v", time.Since(began))
	if p := runB(t, bctx, "progress", chromedp.Text(chromedp.CSS(`#progress-text`))); p != "6000 of 10000 machines running (60%)" {
		t.Errorf("got progress %q, want 6000 of 10000 machines running (60%%)", p)
	}
	tiles := runB(t, bctx, "tiles", chromedp.Evaluate[int](`document.querySelectorAll('#zones .tile').length`))
	cols := runB(t, bctx, "columns", chromedp.Evaluate[int](`document.querySelectorAll('#zones .zone').length`))
	// Columns: not placed (4,000), a, b, c (2,000 each) and the empty,
	// unavailable d; the four full ones draw dashTileCap tiles each.
	if cols != 5 || tiles != 4*dashTileCap {
		t.Errorf("got %d tiles in %d columns, want %d in 5", tiles, cols, 4*dashTileCap)
	}
	if more := runB(t, bctx, "more", chromedp.Evaluate[int](`document.querySelectorAll('#zones .more').length`)); more != 4 {
		t.Errorf("got %d 'more not drawn' notes, want 4", more)
	}

	// A burst: 3,000 machines start at once; counts follow without a reload.
	began = time.Now()
	up := make([]muster.MachineUpdate, 3000)
	for i := range up {
		up[i] = muster.MachineUpdate{ID: strconv.Itoa(i), Status: muster.Ptr(muster.StatusStarted)}
	}
	if err := h.store.UpdateMachines(ctx, h.model.UUID, up); err != nil {
		t.Fatal(err)
	}
	runB(t, bctx, "started counted", chromedp.Poll[bool](`document.querySelector('#counts [data-state="started"] b').textContent === '3000'`))
	t.Logf("3,000 changed machines shown in %v", time.Since(began))
	frame := runB(t, bctx, "frame time", chromedp.Evaluate[float64](`new Promise(r => { const t = performance.now(); requestAnimationFrame(() => r(performance.now() - t)); })`, chromedp.EvalAwaitPromise))
	t.Logf("next animation frame after %.1f ms", frame)
	shot(t, bctx, "dashboard-10k.png")
}
