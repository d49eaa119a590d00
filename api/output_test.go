package api_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/api"
)

func TestStatusTableCutsLongIDsUnlessWide(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 4) // a docker container id
	st := api.Status{Model: "m", Provider: "docker", Machines: map[string]api.MachineStatus{
		"0": {Life: "alive", InstanceID: long, StatusMessage: strings.Repeat("x", 200)},
		"1": {Life: "alive", InstanceID: "i-0123456789abcdef0"},
	}}
	var narrow, wide bytes.Buffer
	api.WriteStatusTable(&narrow, st, false)
	api.WriteStatusTable(&wide, st, true)
	if strings.Contains(narrow.String(), long) || !strings.Contains(narrow.String(), long[:12]+"…") || !strings.Contains(narrow.String(), "i-0123456789abcdef0") {
		t.Errorf("narrow table:\n%s", narrow.String())
	}
	if strings.Contains(narrow.String(), strings.Repeat("x", 61)) {
		t.Errorf("narrow table keeps a 200-character message:\n%s", narrow.String())
	}
	if !strings.Contains(wide.String(), long) || !strings.Contains(wide.String(), strings.Repeat("x", 200)) {
		t.Errorf("--wide table cuts:\n%s", wide.String())
	}
}

func TestEventsTable(t *testing.T) {
	at := time.Date(2026, 12, 3, 13, 0, 0, 123456789, time.UTC)
	header, rows := api.EventsTable([]api.EventInfo{{Seq: 7, Machine: "3", Time: at, Kind: "start", Actor: "provisioner", Message: " started\n"}, {Seq: 8, Time: at}}, false)
	var b bytes.Buffer
	api.WriteTable(&b, header, rows)
	want := "Time                  Seq  Machine    Kind   Actor        Message\n" +
		"2026-12-03T13:00:00Z  7    machine-3  start  provisioner  started\n" +
		"2026-12-03T13:00:00Z  8    -                              \n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestProgress(t *testing.T) {
	st := api.Status{ProvisionerError: "throttled", Machines: map[string]api.MachineStatus{
		"0": {Life: "alive", InstanceStatus: "running", Status: "started"},
		"1": {Life: "alive", InstanceStatus: "running", Status: "pending"},
		"2": {Life: "alive", InstanceStatus: "provisioning error"},
		"3": {Life: "dying", InstanceStatus: "running", Status: "started"},
	}}
	got := api.Progress(st, []string{"0", "1", "2", "3", "4"})
	want := "instances 3/5 running · agents 2/5 started · 1 in provisioning error · 1 dying · 1 removed · provisioner: throttled"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
