package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/internal/testutil"
)

func TestAgentBinariesCommands(t *testing.T) {
	dir := t.TempDir()
	arm := testutil.WriteELF(t, 183)
	code, out, errOut := runCLI(t, "agent-binaries", "add", arm, "--arch", "arm64", "--data-dir", dir)
	if code != 0 || !strings.HasPrefix(out, "added agent binary "+muster.Version+" linux/arm64 sha256 ") {
		t.Fatalf("add: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "agent-binaries", "list", "--data-dir", dir, "--format", "json")
	var es []controller.AgentBinaryEntry
	if code != 0 || json.Unmarshal([]byte(out), &es) != nil || len(es) != 1 || es[0].Arch != "arm64" || es[0].Size == 0 {
		t.Fatalf("list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "agent-binaries", "list", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "arm64") || !strings.HasPrefix(out, "Version") {
		t.Fatalf("list table: exit %d, stdout %q", code, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"no arch", []string{"agent-binaries", "add", arm, "--data-dir", dir}, 2},
		{"no file", []string{"agent-binaries", "add", "--arch", "arm64", "--data-dir", dir}, 2},
		{"wrong arch", []string{"agent-binaries", "add", arm, "--arch", "amd64", "--data-dir", dir}, 1},
		{"bad format", []string{"agent-binaries", "list", "--format", "xml", "--data-dir", dir}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tc.args...)
			if code != tc.code || !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit %d and one error line", code, errOut, tc.code)
			}
		})
	}
}

// `muster agent --config FILE` logs in with the file's credentials: a
// good file starts the machine and runs until cancelled; a wrong password
// exits 1 with one error line.
func TestAgentCommand(t *testing.T) {
	tc := startController(t, "")
	ctx := context.Background()
	client := tc.client()
	if _, err := client.SetModelConfig(ctx, "default", map[string]string{"sim-agents": "false"}); err != nil {
		t.Fatal(err)
	}
	ids, err := client.AddMachines(ctx, "default", api.AddMachinesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitMachine := func(what string, cond func(api.MachineStatus) bool) {
		t.Helper()
		testutil.Eventually(t, "machine "+ids[0]+" "+what, func() bool {
			st, err := client.Status(ctx, "default")
			return err == nil && cond(st.Machines[ids[0]])
		})
	}
	waitMachine("running", func(m api.MachineStatus) bool { return m.InstanceStatus == string(muster.InstanceRunning) })
	store := tc.ctrl.Store()
	mi, err := store.Model(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	uuid := mi.UUID
	m, err := store.Machine(ctx, uuid, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// The password is only in the instance's user data: give the machine
	// one the test knows.
	password := muster.NewSecret()
	if err := store.UpdateMachines(ctx, uuid, []muster.MachineUpdate{{ID: m.ID, PasswordHash: muster.Ptr(muster.HashSecret(password))}}); err != nil {
		t.Fatal(err)
	}
	cfg := muster.AgentConfig{Controller: tc.ctrl.UUID(), Model: uuid, Machine: m.ID, Nonce: m.Nonce, Password: password,
		APIAddresses: []string{tc.ctrl.URL()}, CACert: string(tc.ctrl.CA().CertPEM)}
	dir := t.TempDir()

	// YAML, as the docker provider names the file.
	yamlPath := filepath.Join(dir, "agent.yaml")
	y := "controller: " + cfg.Controller + "\nmodel: " + cfg.Model + "\nmachine: \"" + cfg.Machine + "\"\nnonce: " + cfg.Nonce +
		"\npassword: " + cfg.Password + "\napi-addresses:\n  - " + cfg.APIAddresses[0] + "\nca-cert: |\n  " +
		strings.ReplaceAll(strings.TrimSpace(cfg.CACert), "\n", "\n  ") + "\n"
	if err := os.WriteFile(yamlPath, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"agent", "--config", yamlPath}, strings.NewReader(""), io.Discard, io.Discard)
	}()
	waitMachine("started", func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("agent exit %d after SIGTERM, want 0", code)
		}
	case <-time.After(testutil.Timeout):
		t.Fatal("agent did not stop")
	}

	bad := cfg
	bad.Password = "wrong"
	b, _ := json.Marshal(bad)
	jsonPath := filepath.Join(dir, "bad.json")
	os.WriteFile(jsonPath, b, 0o600)
	var errOut bytes.Buffer
	code := run(ctx, []string{"agent", "--config", jsonPath, "--log-format", "json"}, strings.NewReader(""), io.Discard, &errOut)
	lastLine := errOut.String()
	if i := strings.LastIndex(strings.TrimSuffix(lastLine, "\n"), "\n"); i >= 0 {
		lastLine = lastLine[i+1:]
	}
	if code != 1 || !strings.HasPrefix(lastLine, "error: ") || !strings.Contains(lastLine, "unauthorized") {
		t.Fatalf("wrong password: exit %d, last stderr line %q; want 1 and error: unauthorized", code, lastLine)
	}

	for _, bc := range []struct {
		name, content, want string
		code                int
	}{
		{"empty", "", "agent config is empty", 1},
		{"missing nonce", `{"model":"m","machine":"0","password":"p"}`, "nonce is missing", 1},
		{"bad yaml", "machine: [", "bad agent config", 1},
	} {
		t.Run(bc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "agent.yaml")
			os.WriteFile(p, []byte(bc.content), 0o600)
			code, _, errOut := runCLI(t, "agent", "--config", p)
			if code != bc.code || !strings.Contains(errOut, bc.want) || strings.Count(errOut, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit %d and one line containing %q", code, errOut, bc.code, bc.want)
			}
		})
	}
}
