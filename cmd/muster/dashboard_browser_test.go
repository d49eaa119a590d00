package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// openDashboard starts a controller and opens its dashboard in headless
// chromium (MUSTER_TEST_BROWSER=1), marking the page (window.musterMark =
// 7) so that a test can tell it was not reloaded.
func openDashboard(t *testing.T) (*testController, context.Context) {
	t.Helper()
	if os.Getenv("MUSTER_TEST_BROWSER") != "1" {
		t.Skip("set MUSTER_TEST_BROWSER=1 to run the dashboard in headless chromium (Debian package chromium)")
	}
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("MUSTER_TEST_BROWSER=1 but no chromium found: apt-get install chromium")
	}
	tc := startController(t, "")
	u := strings.TrimSpace(tc.ok("dashboard"))

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), // the controller's CA, for this browser only
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute) // guards against a hang only
	t.Cleanup(cancel)

	if err := chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS(`#conn.live`))); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.musterMark = 7`)); err != nil {
		t.Fatal(err)
	}
	return tc, ctx
}

// TestDashboardDemoFleetInBrowser opens the URL of `muster dashboard` of a
// real controller in headless chromium, applies the demo fleet and watches
// the page reach "all running" without a reload (MUSTER_TEST_BROWSER=1).
func TestDashboardDemoFleetInBrowser(t *testing.T) {
	tc, ctx := openDashboard(t)
	tc.ok("apply", "-f", "demo_fleet.yaml")
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('#zones .tile').length === 12 &&
		document.getElementById('progress-text').textContent === 'All 12 machines running'`)); err != nil {
		text, _ := chromedp.Run(context.Background(), chromedp.Text(chromedp.CSS(`main`)))
		t.Fatalf("waiting for 12 running machines: %v; page:\n%s", err, text)
	}
	if mark, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.musterMark || 0`)); err != nil || mark != 7 {
		t.Errorf("page reloaded (mark %d, err %v)", mark, err)
	}
	// Every zone column of the sim (a, b, c) holds machines.
	cols, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#zones .zone')].filter(z => z.querySelector('.tile')).map(z => z.dataset.zone)`))
	if err != nil || strings.Join(cols, ",") != "a,b,c" {
		t.Errorf("got zone columns with machines %v (err %v), want a,b,c", cols, err)
	}
	dir := os.Getenv("MUSTER_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "dashboard-demo.png")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}
