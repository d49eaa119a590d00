package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/sim"
)

// escape is a terminal escape sequence (clear the screen), as an agent or
// a cloud might write it.
const escape = "\x1b[2J"

// S8: text agents and clouds wrote reaches the terminal with its control
// characters escaped: status, show-machine, events, sim instances and
// error messages.
func TestE2EAgentTextEscaped(t *testing.T) {
	tc := startController(t, "")
	ctx := context.Background()
	st := tc.ctrl.Store()
	// A model no provisioner runs (no controller has its provider), so
	// the test alone writes its machines.
	m, err := st.CreateModel(ctx, muster.Model{Name: "other", Provider: "cloud-of-another-build", Settings: muster.DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := st.AddMachines(ctx, m.UUID, []muster.MachineTemplate{{}})
	if err != nil {
		t.Fatal(err)
	}
	id := ms[0].ID
	nonce := "machine-0:" + muster.NewUUID()
	if err := st.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: id, Nonce: muster.Ptr(nonce)}}); err != nil {
		t.Fatal(err)
	}
	errs, err := st.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: id, Nonce: nonce,
		Info: muster.InstanceInfo{InstanceID: "i-" + escape, Zone: "a"}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("record instance: %v %v", err, errs)
	}
	if err := st.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: id, StatusMessage: muster.Ptr("msg" + escape),
		Addresses: &[]string{"addr" + escape}, Hardware: &muster.Hardware{Arch: "amd64", AvailabilityZone: "hw" + escape}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, MachineID: id, Actor: "agent/0", Kind: "status", Message: "event" + escape}}); err != nil {
		t.Fatal(err)
	}
	sc := sim.NewClient(tc.client().SimURL(muster.DefaultModel), tc.client().HTTPClient())
	if _, err := sc.CreateInstance(ctx, sim.NewInstance{Zone: "a", Controller: muster.NewUUID(), Model: muster.NewUUID(), MachineID: "sim" + escape}); err != nil {
		t.Fatal(err)
	}

	const shown = `\x1b[2J`
	for _, c := range []struct {
		args []string
		want []string // each shown with the escape escaped
	}{
		{[]string{"status", "-m", "other"}, []string{"i-" + shown, "addr" + shown, "msg" + shown}},
		{[]string{"show-machine", "-m", "other", id}, []string{"i-", "addr", "msg", "hw"}},
		{[]string{"events", "-m", "other"}, []string{"event" + shown}},
		{[]string{"sim", "instances"}, []string{"sim" + shown}},
	} {
		out := tc.ok(c.args...)
		if strings.Contains(out, "\x1b") {
			t.Errorf("muster %s printed a raw escape:\n%q", strings.Join(c.args, " "), out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("muster %s: output lacks %q:\n%s", strings.Join(c.args, " "), w, out)
			}
		}
	}
	// Error messages: one the server quoted, one quoting raw text.
	code, _, errOut := tc.cli("status", "-m", "model"+escape)
	if code != 1 || strings.Contains(errOut, "\x1b") || !strings.Contains(errOut, "model"+shown) {
		t.Errorf("status of a model named with an escape: exit %d, stderr %q; want exit 1 and the escape escaped once", code, errOut)
	}
	code, _, errOut = runCLI(t, "--config", tc.dir+"/config"+escape, "status")
	if code != 1 || strings.Contains(errOut, "\x1b") || !strings.Contains(errOut, "config"+shown) {
		t.Errorf("status with a config path holding an escape: exit %d, stderr %q; want exit 1 and the escape escaped", code, errOut)
	}
}

// runBin runs the built binary to its end and returns its exit status and
// standard error.
func runBin(tb testing.TB, pt *procTest, args ...string) (int, string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), convergeDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, pt.bin, args...)
	cmd.Env = pt.env
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		tb.Fatalf("run muster %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), errb.String()
}

// S1, S2, S3 with real processes: a bad listen address fails before the
// store is initialised, so the next start works; a second controller on
// the data dir is refused with the first one's pid; every store or data
// dir failure is one line naming it, never a panic; admin-token replaces a
// lost token.
func TestControllerProcessRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real processes; skipped with -short")
	}
	pt := newProcTest(t)
	code, errOut := runBin(t, pt, "controller", "--data-dir", pt.dataDir, "--listen", "27093")
	if code != 1 || errOut != "error: listen on 27093: address 27093: missing port in address\n" {
		t.Fatalf("--listen 27093: exit %d, stderr %q", code, errOut)
	}
	first := pt.startController()
	defer first.stop()
	pt.cli("status") // the start after the failed one wrote a working client config

	code, errOut = runBin(t, pt, "controller", "--data-dir", pt.dataDir, "--listen", "127.0.0.1:0")
	if want := fmt.Sprintf("error: data dir %s is in use by pid %d\n", pt.dataDir, first.cmd.Process.Pid); code != 1 || errOut != want {
		t.Errorf("second controller: exit %d, stderr %q; want 1, %q", code, errOut, want)
	}

	file := filepath.Join(pt.tmp, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	type refusal struct{ name, dataDir, store, want string }
	cases := []refusal{
		{"unknown store scheme", "", "bogus://x", "bogus://x"},
		{"postgres refusing connections", "", "postgres://nobody@127.0.0.1:1/x", "postgres://127.0.0.1:1/x"},
		{"sqlite in a missing dir", "", "sqlite:///not/a/dir/x.db", "/not/a/dir/x.db"},
		{"data dir under a regular file", filepath.Join(file, "data"), "", filepath.Join(file, "data")},
	}
	if os.Geteuid() != 0 { // root writes in a 0500 dir
		ro := filepath.Join(pt.tmp, "read-only")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, refusal{"read-only data dir", ro, "", ro})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dataDir
			if dir == "" {
				dir = t.TempDir()
			}
			args := []string{"controller", "--data-dir", dir, "--listen", "127.0.0.1:0"}
			if c.store != "" {
				args = append(args, "--store", c.store)
			}
			code, errOut := runBin(t, pt, args...)
			if code != 1 || !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 ||
				!strings.Contains(errOut, c.want) || strings.Contains(errOut, "panic") {
				t.Errorf("exit %d, stderr %q; want 1 and one line naming %s", code, errOut, c.want)
			}
		})
	}

	// admin-token: refused while the controller runs; once it is stopped,
	// a new token works and the old one is refused.
	code, _, errOut = runCLI(t, "controller", "admin-token", "--data-dir", pt.dataDir)
	if code != 1 || !strings.Contains(errOut, "in use by pid") {
		t.Errorf("admin-token while the controller runs: exit %d, stderr %q", code, errOut)
	}
	first.stop()
	old, err := controller.LoadClientConfig(pt.config())
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "controller", "admin-token", "--data-dir", pt.dataDir)
	if code != 0 || !strings.Contains(out, pt.config()) {
		t.Fatalf("admin-token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	second := pt.startController()
	defer second.stop()
	pt.cli("status")
	cc, err := controller.LoadClientConfig(pt.config())
	if err != nil {
		t.Fatal(err)
	}
	cc.Token = old.Token
	oldConfig := filepath.Join(pt.tmp, "old-token.yaml")
	if err := cc.Save(oldConfig); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "--config", oldConfig, "status"); code != 1 || !strings.Contains(errOut, "unauthorized") {
		t.Errorf("the old token after admin-token: exit %d, stderr %q; want unauthorized", code, errOut)
	}
}
