package controller

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/sqlstore"
)

// openErr opens a controller with cfg as given (Providers and Logger
// filled in) and returns the error; a controller that opens is closed at
// the end of the test.
func openErr(tb testing.TB, cfg Config) error {
	tb.Helper()
	if cfg.Providers == nil {
		cfg.Providers = testProviders
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Timeout)
	defer cancel()
	c, err := Open(ctx, cfg)
	if err == nil {
		tb.Cleanup(func() { closeTest(tb, c) })
	}
	return err
}

// S1: a second controller on a data dir in use is refused with the first
// one's pid; the lock goes with Close, and with a failed Open.
func TestSecondOpenOnDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	if err := openErr(t, Config{DataDir: dir, Listen: "127.0.0.1:0", StoreURL: "bogus://x"}); err == nil {
		t.Fatal("open with store bogus://x: no error")
	}
	c := openTest(t, dir, Config{}) // the failed Open left no lock behind
	err := openErr(t, Config{DataDir: dir, Listen: "127.0.0.1:0"})
	want := fmt.Sprintf("data dir %s is in use by pid %d", dir, os.Getpid())
	if muster.ErrorCode(err) != muster.EConflict || err.Error() != want {
		t.Fatalf("second open: got %v (code %s), want %s %q", err, muster.ErrorCode(err), muster.EConflict, want)
	}
	closeTest(t, c)
	openTest(t, dir, Config{})
}

// S2: a first start that fails on its listen address leaves the store
// untouched: the next start is a first start and writes a client config
// whose token works.
func TestBadListenThenGoodStart(t *testing.T) {
	dir := t.TempDir()
	busy := openTest(t, t.TempDir(), Config{})
	for _, listen := range []string{"27093", strings.TrimPrefix(busy.URL(), "https://")} {
		err := openErr(t, Config{DataDir: dir, Listen: listen})
		if err == nil || !strings.Contains(err.Error(), listen) {
			t.Fatalf("listen %q: got %v, want an error naming the address", listen, err)
		}
	}
	c := openTest(t, dir, Config{})
	if !c.ClientConfigWritten() {
		t.Fatal("the start after a failed first start wrote no client config")
	}
	if _, err := adminClient(t, c).Models(context.Background()); err != nil {
		t.Fatalf("the client config's token: %v", err)
	}
}

// S2: admin-token refuses a data dir in use, then revokes the old token
// and writes a new one that works.
func TestResetAdminToken(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := openTest(t, dir, Config{})
	old, err := LoadClientConfig(c.ClientConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ResetAdminToken(ctx, dir, ""); muster.ErrorCode(err) != muster.EConflict || !strings.Contains(err.Error(), "in use by pid") {
		t.Fatalf("admin-token while the controller runs: got %v, want a conflict naming the pid", err)
	}
	closeTest(t, c)
	path, err := ResetAdminToken(ctx, dir, "")
	if err != nil || path != filepath.Join(dir, "client.yaml") {
		t.Fatalf("admin-token: got %q, %v; want %s/client.yaml", path, err, dir)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client config after admin-token: %v, %v; want mode 0600", fi, err)
	}
	c2 := openTest(t, dir, Config{})
	cl, err := api.NewClient(api.ClientConfig{URL: c2.URL(), CACert: []byte(old.CACert), Token: old.Token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Models(ctx); muster.ErrorCode(err) != muster.EUnauthorized {
		t.Errorf("the old token after admin-token: got %v, want %s", err, muster.EUnauthorized)
	}
	if _, err := adminClient(t, c2).Models(ctx); err != nil {
		t.Errorf("the new token: %v", err)
	}
	if _, err := ResetAdminToken(ctx, t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "has no store") {
		t.Errorf("admin-token on an empty data dir: got %v, want no store", err)
	}
}

// S4: with umask 0, in a data dir that exists with mode 0755, the data
// dir becomes 0700 and every file muster writes in it is 0600.
func TestFileModesWithUmaskZero(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	keyDir := t.TempDir()
	c := openTest(t, dir, Config{})
	ctx := context.Background()
	cl := adminClient(t, c)
	ids, err := cl.AddMachines(ctx, muster.DefaultModel, api.AddMachinesRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the machines' instances", func() bool {
		st, err := cl.Status(ctx, muster.DefaultModel)
		if err != nil {
			return false
		}
		n := 0
		for _, m := range st.Machines {
			if m.InstanceID != "" {
				n++
			}
		}
		return n == len(ids)
	})
	bin := testutil.WriteELF(t, 62) // EM_X86_64
	if _, err := c.agentBins.Add(bin, "9.9.9", "linux", "amd64", time.Now()); err != nil {
		t.Fatal(err)
	}
	// Every kind of file muster writes is there to be checked.
	for _, pattern := range []string{"muster.db", "muster.db-wal", "muster.db-shm", "muster.lock", "controller-id", "client.yaml",
		auth.CACertFile, "sim-*.json", "agent-binaries/index.json", "agent-binaries/muster-9.9.9-linux-amd64-*"} {
		if ms, _ := filepath.Glob(filepath.Join(dir, pattern)); len(ms) == 0 {
			t.Errorf("no %s in the data dir", pattern)
		}
	}
	checkPrivate(t, dir)
	closeTest(t, c)
	checkPrivate(t, dir)
	// Files an older muster left readable by others are tightened.
	for _, f := range []string{"client.yaml", auth.CACertFile, IDFile} {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// On the same address: the client config needs no new URL.
	if err := openErr(t, Config{DataDir: dir, Listen: strings.TrimPrefix(c.URL(), "https://")}); err != nil {
		t.Fatal(err)
	}
	checkPrivate(t, dir)
	// The CA key file too.
	keyFile := filepath.Join(keyDir, "ca.key")
	c2 := openTest(t, filepath.Join(t.TempDir(), "data2"), Config{CAKeyFile: keyFile})
	closeTest(t, c2)
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca key file: %v, %v; want mode 0600", fi, err)
	}
}

// checkPrivate fails unless dir and its subdirs are 0700 and every file
// in them 0600.
func checkPrivate(tb testing.TB, dir string) {
	tb.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if fi.Mode().Perm() != want {
			tb.Errorf("%s: mode %o, want %o", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	if files == 0 {
		tb.Fatalf("no files in %s", dir)
	}
}

// S4: with a CA key file the store holds no CA key; a restart with the
// file uses the same CA; a start without it says what is missing; a store
// that holds the key has it moved to the file.
func TestCAKeyFile(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	keyFile := filepath.Join(t.TempDir(), "ca.key")
	c := openTest(t, dir, Config{CAKeyFile: keyFile})
	kv, err := c.Store().ControllerConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kv[cfgCAKey] != "" || strings.Contains(strings.Join(mapValues(kv), "\n"), "PRIVATE KEY") {
		t.Fatal("the store holds the CA key")
	}
	key, err := os.ReadFile(keyFile)
	if err != nil || !strings.Contains(string(key), "PRIVATE KEY") {
		t.Fatalf("ca key file: %v; want the CA's private key", err)
	}
	caPEM := c.CA().CertPEM
	closeTest(t, c)

	c = openTest(t, dir, Config{CAKeyFile: keyFile})
	if string(c.CA().CertPEM) != string(caPEM) {
		t.Error("restart with the key file: another CA")
	}
	if _, err := adminClient(t, c).Models(ctx); err != nil {
		t.Errorf("restart with the key file: %v", err)
	}
	closeTest(t, c)

	err = openErr(t, Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "keeps no ca key") || !strings.Contains(err.Error(), "--ca-key-file") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("restart without the key file: got %v, want one line saying the store keeps no ca key", err)
	}
	err = openErr(t, Config{DataDir: dir, Listen: "127.0.0.1:0", CAKeyFile: filepath.Join(t.TempDir(), "missing.key")})
	if err == nil || !strings.Contains(err.Error(), "missing.key does not exist") {
		t.Fatalf("restart with a missing key file: got %v, want it named", err)
	}

	// A store that keeps its key: moved into the file.
	dir2 := t.TempDir()
	c = openTest(t, dir2, Config{})
	caPEM = c.CA().CertPEM
	closeTest(t, c)
	keyFile2 := filepath.Join(t.TempDir(), "ca.key")
	c = openTest(t, dir2, Config{CAKeyFile: keyFile2})
	kv, err = c.Store().ControllerConfig(ctx)
	if err != nil || kv[cfgCAKey] != "" || string(c.CA().CertPEM) != string(caPEM) {
		t.Fatalf("moving the key out of the store: got key %q, %v, same CA %v", kv[cfgCAKey], err, string(c.CA().CertPEM) == string(caPEM))
	}
	if _, err := auth.ParseCA(caPEM, mustRead(t, keyFile2)); err != nil {
		t.Fatalf("the moved key: %v", err)
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// S10: the trim loop trims at once and then every TrimEvery on the clock,
// with the model's event-retention.
func TestTrimLoopOnFakeClock(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(t0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "muster.db"), sqlstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	settings := muster.DefaultSettings()
	settings.EventRetention = 24 * time.Hour
	m, err := st.CreateModel(ctx, muster.Model{Name: "m", Provider: "sim", Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	appendEvent := func(msg string, at time.Time) {
		if err := st.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, Time: at, Actor: "test", Kind: "test", Message: msg}}); err != nil {
			t.Fatal(err)
		}
	}
	messages := func() string {
		es, err := st.Events(ctx, m.UUID, muster.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if e.Kind == "test" {
				out = append(out, e.Message)
			}
		}
		return strings.Join(out, ",")
	}
	appendEvent("old", t0.Add(-25*time.Hour))
	appendEvent("new", t0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		trimLoop(ctx, st, clock, m.UUID, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	}()
	testutil.Eventually(t, "the event older than the retention trimmed at start", func() bool { return messages() == "new" })
	waitTimers(t, clock, 1)
	clock.Advance(23 * time.Hour)
	waitTimers(t, clock, 1) // the loop trimmed again and waits for the next hour
	if got := messages(); got != "new" {
		t.Fatalf("after 23h: got events %q, want new", got)
	}
	clock.Advance(2 * time.Hour)
	testutil.Eventually(t, "the event trimmed once it is older than the retention", func() bool { return messages() == "" })
	cancel()
	<-done
}

// waitTimers waits until the clock has n timers waiting: the code under
// test has started to wait on it.
func waitTimers(tb testing.TB, clock *fakeclock.Clock, n int) {
	tb.Helper()
	select {
	case <-clock.WaitForTimers(n):
	case <-time.After(testutil.Timeout):
		tb.Fatalf("no %d timers waiting on the clock after %s", n, testutil.Timeout)
	}
}

// S10: the controller running a model's provisioner trims the model when
// it starts.
func TestControllerTrimsModelsItRuns(t *testing.T) {
	dir := t.TempDir()
	c := openTest(t, dir, Config{})
	ctx := context.Background()
	def, err := c.Store().Model(ctx, muster.DefaultModel)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the default model's provisioner running", func() bool { return c.Runs(def.UUID) })
	closeTest(t, c)
	st, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(dir, "muster.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.AppendEvents(ctx, []muster.Event{{ModelUUID: def.UUID, Time: time.Now().Add(-8 * 24 * time.Hour), Actor: "test", Kind: "test", Message: "old"}})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	c = openTest(t, dir, Config{})
	testutil.Eventually(t, "the event older than 7 days trimmed", func() bool {
		es, err := c.Store().Events(ctx, def.UUID, muster.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Kind == "test" {
				return false
			}
		}
		return true
	})
}
