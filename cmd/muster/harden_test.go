package main

import (
	"context"
	"strings"
	"testing"

	"github.com/musterhq/muster"
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
