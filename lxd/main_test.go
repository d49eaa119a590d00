package lxd

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testutil"
)

// testCacheDir keeps the image tarball between runs:
// MUSTER_TEST_LXD_CACHE, default /var/cache/muster-lxd.
func testCacheDir() string {
	if d := os.Getenv("MUSTER_TEST_LXD_CACHE"); d != "" {
		return d
	}
	return "/var/cache/muster-lxd"
}

// TestMain makes sure the daemon has the test image before the live tests
// run: the alias when it exists, else the cached tarball imported, else
// the image built (minutes, once).
func TestMain(m *testing.M) {
	if os.Getenv("MUSTER_TEST_LXD") == "1" {
		if err := daemonAnswers(); err != nil {
			fmt.Fprintf(os.Stderr, "lxd tests: %v\n", err)
			os.Exit(1)
		}
		// Runs until the process exits.
		testutil.Watchdog("the LXD daemon (GET /1.0, GET /1.0/instances)", 15*time.Second, 20*time.Second, NewClient(DefaultSocket).Ping)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		began := time.Now()
		img, err := BuildImage(ctx, ImageOptions{CacheDir: testCacheDir(), Alias: testImage(), Log: os.Stderr})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "lxd tests: image %s: %v\n", testImage(), err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "lxd tests: image %s = %.12s (built %v, imported %v) in %v\n",
			img.Alias, img.Fingerprint, img.Built, img.Imported, time.Since(began).Round(time.Millisecond))
	}
	os.Exit(m.Run())
}

// TestImageReused: with the alias in place BuildImage neither builds nor
// imports; with only the cached tarball it imports it under the alias.
func TestImageReused(t *testing.T) {
	needLXD(t)
	ctx := testCtx(t)
	img, err := BuildImage(ctx, ImageOptions{CacheDir: testCacheDir(), Alias: testImage()})
	if err != nil {
		t.Fatal(err)
	}
	if img.Built || img.Imported || len(img.Fingerprint) != 64 {
		t.Errorf("alias present: got %+v, want it reused", img)
	}
	alias := "muster-test/" + randomHex(t, 4)
	c := NewClient(DefaultSocket)
	defer c.Close()
	defer c.DeleteImageAlias(context.Background(), alias)
	other, err := BuildImage(ctx, ImageOptions{CacheDir: testCacheDir(), Alias: alias})
	if err != nil {
		t.Fatal(err)
	}
	if other.Built || other.Fingerprint != img.Fingerprint {
		t.Errorf("new alias from the cache: got %+v, want the cached tarball's image %s", other, img.Fingerprint)
	}
	a, err := c.ImageAlias(ctx, alias)
	if err != nil || a.Target != img.Fingerprint {
		t.Errorf("alias %s: got %+v, %v", alias, a, err)
	}
}
