package agent_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

func TestRunReportsStarted(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "b")
	started := make(chan struct{}, 4)
	r := h.run(t, cfg, h.options(started))
	waitFor(t, started, "machine started")

	m := h.machine(t, cfg.Machine)
	if m.Status != muster.StatusStarted {
		t.Fatalf("got status %s, want started", m.Status)
	}
	// Measured fields replace the recorded ones; the rest is kept.
	want := muster.Hardware{Arch: "amd64", Cores: 3, Mem: 5000, RootDisk: 8192, AvailabilityZone: "b"}
	if m.Instance.Hardware != want {
		t.Errorf("got hardware %+v, want %+v", m.Instance.Hardware, want)
	}
	if !slices.Equal(m.Instance.Addresses, []string{"10.9.0.7"}) {
		t.Errorf("got addresses %v, want [10.9.0.7]", m.Instance.Addresses)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("got %v from Run after cancel, want nil", err)
	}
}

func TestRunTriesEachAddress(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "a")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + l.Addr().String()
	l.Close() // nothing listens there any more
	cfg.APIAddresses = []string{dead, h.ts.URL}
	started := make(chan struct{}, 4)
	h.run(t, cfg, h.options(started))
	waitFor(t, started, "machine started through the second address")
	if got := h.machine(t, cfg.Machine).Status; got != muster.StatusStarted {
		t.Fatalf("got status %s, want started", got)
	}
}

func TestRunWrongPasswordExits(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "a")
	cfg.Password = "not-the-password"
	// No clock advance: the agent must give up at once.
	err := agent.Run(context.Background(), cfg, h.options(nil))
	if got := muster.ErrorCode(err); got != muster.EUnauthorized {
		t.Fatalf("got error %v (code %q), want code %q", err, got, muster.EUnauthorized)
	}
	if got := h.logins.Load(); got != 1 {
		t.Errorf("got %d logins, want 1", got)
	}
	if got := h.machine(t, cfg.Machine).Status; got != muster.StatusPending {
		t.Errorf("got status %s, want pending", got)
	}
}

func TestRunInvalidConfig(t *testing.T) {
	err := agent.Run(context.Background(), muster.AgentConfig{Machine: "0"}, agent.Options{})
	if got := muster.ErrorCode(err); got != muster.EInvalid {
		t.Fatalf("got error %v (code %q), want code %q", err, got, muster.EInvalid)
	}
}

// Scenario 25: a wrong nonce is refused not-provisioned; the agent retries
// for a minute and then exits for good.
func TestScenario25_WrongNonceRetriesThenGivesUp(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "a")
	cfg.Nonce = "machine-0:" + muster.NewUUID()
	t0 := h.clock.Now()
	r := h.run(t, cfg, h.options(nil))
	advanceUntil(t, h.clock, 5*time.Second, "the agent to give up", r.exited)
	err := r.stop(t)
	if got := muster.ErrorCode(err); got != muster.ENotProvisioned {
		t.Fatalf("got error %v (code %q), want code %q", err, got, muster.ENotProvisioned)
	}
	if got := h.clock.Now().Sub(t0); got < agent.DefaultNotProvisionedFor {
		t.Errorf("gave up after %s, want at least %s", got, agent.DefaultNotProvisionedFor)
	}
	if got := h.logins.Load(); got < 3 {
		t.Errorf("got %d logins, want retries (at least 3)", got)
	}
	if got := h.machine(t, cfg.Machine).Status; got != muster.StatusPending {
		t.Errorf("got status %s, want pending", got)
	}
}

// Scenario 25, second half: the right nonce starts the machine; heartbeats
// that stop make it down after three missed periods, and started again
// when they resume.
func TestScenario25_HeartbeatsStopThenResume(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "a")
	started := make(chan struct{}, 4)
	h.run(t, cfg, h.options(started))
	waitFor(t, started, "machine started")
	period := muster.DefaultSettings().AgentHeartbeat

	// Heartbeats keep the machine up over many periods.
	before := h.heartbeats.Load()
	advanceUntil(t, h.clock, period/2, "five heartbeats", func() bool { return h.heartbeats.Load() >= before+5 })
	if got := h.machine(t, cfg.Machine).Status; got != muster.StatusStarted {
		t.Fatalf("got status %s while heartbeating, want started", got)
	}

	h.blockHeartbeats.Store(true)
	blockedAt := h.clock.Now()
	advanceUntil(t, h.clock, period/2, "machine down", func() bool { return h.machine(t, cfg.Machine).Status == muster.StatusDown })
	if got := h.clock.Now().Sub(blockedAt); got < 2*period {
		t.Errorf("down %s after heartbeats stopped, want about %d periods of %s", got, api.MissedHeartbeats, period)
	}
	logins := h.logins.Load()

	h.blockHeartbeats.Store(false)
	advanceUntil(t, h.clock, period/2, "machine started again", func() bool { return h.machine(t, cfg.Machine).Status == muster.StatusStarted })
	if got := h.logins.Load(); got != logins {
		t.Errorf("got %d logins, want %d: heartbeats alone bring the machine back", got, logins)
	}
}

// A newer login revokes the agent's token: the agent logs in again.
func TestRunLogsInAgainWhenSessionRevoked(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "a")
	started := make(chan struct{}, 4)
	h.run(t, cfg, h.options(started))
	waitFor(t, started, "machine started")
	if _, err := h.admin.WithToken("").Login(context.Background(), api.LoginRequest{Model: cfg.Model, Machine: cfg.Machine, Password: cfg.Password, Nonce: cfg.Nonce}); err != nil {
		t.Fatal(err)
	}
	got := 0
	advanceUntil(t, h.clock, 5*time.Second, "second start report", func() bool {
		select {
		case <-started:
			got++
		default:
		}
		return got == 1
	})
	if n := h.logins.Load(); n != 3 {
		t.Errorf("got %d logins, want 3 (agent, test, agent again)", n)
	}
}

// SPEC §4: an agent can read and write only its own machine.
func TestAgentCannotTouchOtherMachine(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	cfg0 := h.provision(t, "a")
	cfg1 := h.provision(t, "b")
	res, err := h.admin.WithToken("").Login(ctx, api.LoginRequest{Model: cfg0.Model, Machine: cfg0.Machine, Password: cfg0.Password, Nonce: cfg0.Nonce})
	if err != nil {
		t.Fatal(err)
	}
	c := h.admin.WithToken(res.Token)
	before := h.machine(t, cfg1.Machine)
	calls := []struct {
		name string
		call func() error
	}{
		{"read", func() error { _, err := c.AgentMachine(ctx, cfg1.Model, cfg1.Machine); return err }},
		{"write", func() error {
			_, err := c.SetAgentMachine(ctx, cfg1.Model, cfg1.Machine, api.AgentUpdate{Status: muster.Ptr("started")})
			return err
		}},
		{"heartbeat", func() error { _, err := c.Heartbeat(ctx, cfg1.Model, cfg1.Machine); return err }},
		{"admin api", func() error { _, err := c.Status(ctx, "default"); return err }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if got := muster.ErrorCode(err); got != muster.EForbidden && got != muster.EUnauthorized {
				t.Fatalf("got error %v (code %q), want forbidden or unauthorized", err, got)
			}
			if tc.name != "admin api" && muster.ErrorCode(err) != muster.EForbidden {
				t.Fatalf("got code %q, want %q", muster.ErrorCode(err), muster.EForbidden)
			}
		})
	}
	after := h.machine(t, cfg1.Machine)
	if after.Status != before.Status || after.Status != muster.StatusPending {
		t.Errorf("got machine %s status %s, want it untouched (pending)", cfg1.Machine, after.Status)
	}
	// Its own machine it may read.
	if _, err := c.AgentMachine(ctx, cfg0.Model, cfg0.Machine); err != nil {
		t.Errorf("own machine: got %v, want no error", err)
	}
}

func TestProbeHardware(t *testing.T) {
	meminfo := "MemTotal:        8388608 kB\nMemFree: 1 kB\n"
	tests := []struct {
		name string
		fs   fstest.MapFS
		cpus int
		want muster.Hardware
	}{
		{"no cgroup", fstest.MapFS{"proc/meminfo": {Data: []byte(meminfo)}}, 8,
			muster.Hardware{Arch: "amd64", Cores: 8, Mem: 8192}},
		{"cgroup v2 limits", fstest.MapFS{
			"proc/meminfo":              {Data: []byte(meminfo)},
			"sys/fs/cgroup/cpu.max":     {Data: []byte("150000 100000\n")},
			"sys/fs/cgroup/memory.max":  {Data: []byte("1073741824\n")},
			"sys/fs/cgroup/cgroup.type": {Data: []byte("domain\n")},
		}, 8, muster.Hardware{Arch: "amd64", Cores: 2, Mem: 1024}},
		{"cgroup v2 unlimited", fstest.MapFS{
			"proc/meminfo":             {Data: []byte(meminfo)},
			"sys/fs/cgroup/cpu.max":    {Data: []byte("max 100000\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("max\n")},
		}, 4, muster.Hardware{Arch: "amd64", Cores: 4, Mem: 8192}},
		{"cgroup v1", fstest.MapFS{
			"proc/meminfo":                               {Data: []byte(meminfo)},
			"sys/fs/cgroup/cpu/cpu.cfs_quota_us":         {Data: []byte("50000\n")},
			"sys/fs/cgroup/cpu/cpu.cfs_period_us":        {Data: []byte("100000\n")},
			"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")},
		}, 4, muster.Hardware{Arch: "amd64", Cores: 1, Mem: 8192}},
		{"quota above cpus", fstest.MapFS{"sys/fs/cgroup/cpu.max": {Data: []byte("800000 100000")}}, 2,
			muster.Hardware{Arch: "amd64", Cores: 2}},
		{"nothing readable", fstest.MapFS{}, 1, muster.Hardware{Arch: "amd64", Cores: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := agent.ProbeHardwareFS(tt.fs, tt.cpus, "amd64"); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestProbeThisHost(t *testing.T) {
	hw := agent.ProbeHardware()
	if hw.Arch == "" || hw.Cores == 0 {
		t.Errorf("got %+v, want arch and cores", hw)
	}
	for _, a := range agent.InterfaceAddresses() {
		ip := net.ParseIP(a)
		if ip == nil || ip.IsLoopback() {
			t.Errorf("got address %q, want a non-loopback IP", a)
		}
	}
}

// A machine being removed is dying: its agent makes it dead (as Juju's
// machiner does), so that the provisioner stops the instance, and then
// calls the controller no more.
func TestRunMakesDyingMachineDead(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "a")
	started := make(chan struct{}, 4)
	r := h.run(t, cfg, h.options(started))
	waitFor(t, started, "machine started")
	if err := h.store.UpdateMachines(context.Background(), h.model.UUID, []muster.MachineUpdate{{ID: cfg.Machine, Life: muster.Ptr(muster.LifeDying)}}); err != nil {
		t.Fatal(err)
	}
	advanceUntil(t, h.clock, 5*time.Second, "machine dead", func() bool { return h.machine(t, cfg.Machine).Life == muster.LifeDead })
	beats := h.heartbeats.Load()
	h.clock.Advance(time.Minute)
	time.Sleep(20 * time.Millisecond)
	if got := h.heartbeats.Load(); got != beats {
		t.Errorf("got %d heartbeats after the machine died, want none", got-beats)
	}
	if r.exited() {
		t.Error("agent exited on its own, want it idle until stopped")
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("got %v from Run, want nil", err)
	}
}

func TestRunMachineAlreadyDying(t *testing.T) {
	h := newHarness(t)
	cfg := h.provision(t, "a")
	if err := h.store.UpdateMachines(context.Background(), h.model.UUID, []muster.MachineUpdate{{ID: cfg.Machine, Life: muster.Ptr(muster.LifeDying)}}); err != nil {
		t.Fatal(err)
	}
	// No clock advance: the agent makes the machine dead right after login.
	r := h.run(t, cfg, h.options(nil))
	testutil.Eventually(t, "machine made dead", func() bool { return h.machine(t, cfg.Machine).Life == muster.LifeDead })
	if err := r.stop(t); err != nil {
		t.Fatalf("got %v from Run, want nil", err)
	}
}
