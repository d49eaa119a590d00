package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/sim"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newClock() *fakeclock.Clock { return fakeclock.New(epoch) }

func startParams(machine, zone string) muster.StartParams {
	return muster.StartParams{MachineID: machine, Zone: zone, Base: "ubuntu@24.04", LaunchToken: "tok-" + machine}
}

func mustStart(tb testing.TB, p muster.Provider, sp muster.StartParams) muster.StartResult {
	tb.Helper()
	res, err := p.StartInstance(context.Background(), sp)
	if err != nil {
		tb.Fatalf("StartInstance(machine %s): %v", sp.MachineID, err)
	}
	return res
}

func kindOf(err error) (muster.ProviderErrorKind, string) {
	var pe *muster.ProviderError
	if errors.As(err, &pe) {
		return pe.Kind, pe.Zone
	}
	return 0, ""
}

func TestMatchType(t *testing.T) {
	tests := []struct {
		name     string
		cons     string
		arch     string
		wantType string
		wantArch string
		wantErr  bool
	}{
		{"no constraints", "", "amd64", "s1.small", "amd64", false},
		{"cores 2", "cores=2", "amd64", "s1.medium", "amd64", false},
		{"cores 3 rounds up", "cores=3", "amd64", "s1.large", "amd64", false},
		{"mem 4G", "mem=4G", "amd64", "s1.medium", "amd64", false},
		{"mem 5G needs large", "mem=5G", "amd64", "s1.large", "amd64", false},
		{"cores and mem", "cores=2 mem=20G", "amd64", "s1.xlarge", "amd64", false},
		{"arm64 by param", "", "arm64", "s1.small", "arm64", false},
		{"arm64 by constraint wins", "arch=arm64 cores=8", "amd64", "s1.xlarge", "arm64", false},
		{"instance type", "instance-type=s1.large", "amd64", "s1.large", "amd64", false},
		{"instance type too small", "instance-type=s1.small cores=2", "amd64", "", "", true},
		{"unknown instance type", "instance-type=m5.huge", "amd64", "", "", true},
		{"too many cores", "cores=9", "amd64", "", "", true},
		{"too much mem", "mem=33G", "amd64", "", "", true},
		{"unsupported arch", "arch=s390x", "amd64", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it, err := sim.MatchType(muster.MustParseConstraints(tt.cons), tt.arch)
			if tt.wantErr {
				if k, _ := kindOf(err); k != muster.ErrZoneIndependent {
					t.Fatalf("got %v (kind %v), want a zone-independent error", err, k)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want %s", err, tt.wantType)
			}
			if it.Name != tt.wantType || it.Arch != tt.wantArch {
				t.Errorf("got %s/%s, want %s/%s", it.Name, it.Arch, tt.wantType, tt.wantArch)
			}
		})
	}
}

func TestStartResultHardwareTagsVolumes(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	p := c.Provider(testController, testModel)
	sp := startParams("7", "b")
	sp.Constraints = muster.MustParseConstraints("cores=2 root-disk=20G")
	sp.Tags = map[string]string{"team": "blue", muster.TagModel: "forged"}
	sp.Volumes = []muster.Volume{{Name: "data", Size: 10 << 10, Pool: "ssd"}}
	sp.Attachments = []muster.VolumeAttachment{{Volume: "data", MachineID: "7"}}
	res := mustStart(t, p, sp)

	wantHW := muster.Hardware{Arch: "amd64", Cores: 2, Mem: 4 << 10, RootDisk: 20 << 10, AvailabilityZone: "b"}
	if res.Hardware != wantHW {
		t.Errorf("got hardware %+v, want %+v", res.Hardware, wantHW)
	}
	if len(res.Addresses) != 1 || !strings.HasPrefix(res.Addresses[0], "10.2.") {
		t.Errorf("got addresses %v, want one in zone b's subnet 10.2.0.0/17", res.Addresses)
	}
	if len(res.Volumes) != 1 || res.Volumes[0].Name != "data" || res.Volumes[0].Size != 10<<10 ||
		res.Volumes[0].Pool != "ssd" || !strings.HasPrefix(res.Volumes[0].VolumeID, "vol-") {
		t.Errorf("got volumes %+v, want data 10G in ssd with a vol- id", res.Volumes)
	}
	if len(res.Attachments) != 1 || res.Attachments[0].InstanceID != res.Instance.ID || res.Attachments[0].DeviceName == "" {
		t.Errorf("got attachments %+v, want data attached to %s with a device", res.Attachments, res.Instance.ID)
	}
	wantTags := map[string]string{
		"team": "blue", muster.TagController: testController, muster.TagModel: testModel,
		muster.TagMachine: "7", muster.TagLaunchToken: "tok-7",
	}
	if !reflect.DeepEqual(res.Instance.Tags, wantTags) {
		t.Errorf("got tags %v, want %v", res.Instance.Tags, wantTags)
	}
	if !res.Instance.Created.Equal(epoch) {
		t.Errorf("got created %v, want %v", res.Instance.Created, epoch)
	}
}

func TestStartErrorsClassified(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(*sim.Cloud)
		params   func() muster.StartParams
		wantKind muster.ProviderErrorKind
		wantZone string
	}{
		{"unknown base", nil, func() muster.StartParams { p := startParams("0", "a"); p.Base = "centos@7"; return p }, muster.ErrZoneIndependent, ""},
		{"no fitting type", nil, func() muster.StartParams {
			p := startParams("0", "a")
			p.Constraints = muster.MustParseConstraints("mem=64G")
			return p
		}, muster.ErrZoneIndependent, ""},
		{"zone at zero capacity", func(c *sim.Cloud) {
			zero := 0
			c.SetZone("b", sim.ZoneUpdate{Capacity: &zero})
		}, func() muster.StartParams { return startParams("0", "b") }, muster.ErrCapacity, "b"},
		{"unavailable zone", func(c *sim.Cloud) {
			no := false
			c.SetZone("c", sim.ZoneUpdate{Available: &no})
		}, func() muster.StartParams { return startParams("0", "c") }, muster.ErrCapacity, "c"},
		{"unknown zone", nil, func() muster.StartParams { return startParams("0", "z9") }, muster.ErrUnavailable, "z9"},
		{"zone error rate", func(c *sim.Cloud) {
			c.SetFaults(sim.Faults{ZoneErrorRate: map[string]float64{"a": 1}})
		}, func() muster.StartParams { return startParams("0", "a") }, muster.ErrUnavailable, "a"},
		{"call error rate", func(c *sim.Cloud) {
			c.SetFaults(sim.Faults{ErrorRate: map[string]float64{sim.CallStart: 1}})
		}, func() muster.StartParams { return startParams("0", "a") }, muster.ErrUnavailable, ""},
	}
	for _, tt := range tests {
		for _, via := range []string{"in-process", "http"} {
			t.Run(tt.name+"/"+via, func(t *testing.T) {
				c := openCloud(t, sim.Config{Clock: newClock()})
				if tt.setup != nil {
					tt.setup(c)
				}
				var p muster.Provider = c.Provider(testController, testModel)
				if via == "http" {
					srv := httptest.NewServer(sim.NewServer(c))
					t.Cleanup(srv.Close)
					p = sim.NewClient(srv.URL, srv.Client()).Provider(testController, testModel)
				}
				_, err := p.StartInstance(context.Background(), tt.params())
				kind, zone := kindOf(err)
				if kind != tt.wantKind || zone != tt.wantZone {
					t.Errorf("got %v (kind %v, zone %q), want kind %v zone %q", err, kind, zone, tt.wantKind, tt.wantZone)
				}
				if n := c.Stats().Instances; n != 0 {
					t.Errorf("got %d instances, want 0", n)
				}
			})
		}
	}
}

func TestCapacityAccounting(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock(), Zones: []sim.ZoneConfig{{Name: "a", Available: true, Capacity: 3}}})
	p := c.Provider(testController, testModel)
	big := startParams("0", "a")
	big.Constraints = muster.MustParseConstraints("cores=2")
	first := mustStart(t, p, big)
	small := mustStart(t, p, startParams("1", "a"))
	if got := c.Zones()[0].Used; got != 3 {
		t.Fatalf("got %d cores used, want 3", got)
	}
	_, err := p.StartInstance(context.Background(), startParams("2", "a"))
	if k, z := kindOf(err); k != muster.ErrCapacity || z != "a" {
		t.Fatalf("start in full zone: got %v, want a capacity error in a", err)
	}
	// A repeated start with the same token uses no capacity.
	if again := mustStart(t, p, startParams("1", "a")); again.Instance.ID != small.Instance.ID {
		t.Fatalf("repeat start gave %s, want %s", again.Instance.ID, small.Instance.ID)
	}
	if err := p.StopInstances(context.Background(), first.Instance.ID); err != nil {
		t.Fatal(err)
	}
	if got := c.Zones()[0].Used; got != 1 {
		t.Fatalf("after stop got %d cores used, want 1", got)
	}
	mustStart(t, p, startParams("2", "a"))
	if got := c.Stats().InstancesByZone["a"]; got != 2 {
		t.Errorf("got %d instances in a, want 2", got)
	}
}

func TestProviderChoosesLeastUsedZone(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	p := c.Provider(testController, testModel)
	no := false
	c.SetZone("b", sim.ZoneUpdate{Available: &no})
	var zones []string
	for _, m := range []string{"0", "1", "2", "3"} {
		zones = append(zones, mustStart(t, p, startParams(m, "")).Instance.Zone)
	}
	if want := []string{"a", "c", "a", "c"}; !reflect.DeepEqual(zones, want) {
		t.Errorf("got zones %v, want %v", zones, want)
	}
	sp := startParams("4", "")
	sp.Constraints.Zones = []string{"c"}
	if z := mustStart(t, p, sp).Instance.Zone; z != "c" {
		t.Errorf("with zones=c got zone %s, want c", z)
	}
}

func TestFailNext(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	p := c.Provider(testController, testModel)
	if err := c.FailNext("a", 2); err != nil {
		t.Fatal(err)
	}
	var kinds []muster.ProviderErrorKind
	for i := 0; i < 3; i++ {
		_, err := p.StartInstance(context.Background(), startParams(string(rune('0'+i)), "a"))
		k, _ := kindOf(err)
		kinds = append(kinds, k)
	}
	if want := []muster.ProviderErrorKind{muster.ErrCapacity, muster.ErrCapacity, 0}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("got kinds %v, want %v", kinds, want)
	}
	// Other zones are not affected.
	c.FailNext("a", 1)
	mustStart(t, p, startParams("9", "b"))
	if got := c.Zones()[0].FailNext; got != 1 {
		t.Errorf("got %d failures pending in a, want 1", got)
	}
	if err := c.FailNext("nope", 1); muster.ErrorCode(err) != muster.ENotFound {
		t.Errorf("FailNext(unknown zone): got %v, want not-found", err)
	}
}

func TestRequestBucketThrottles(t *testing.T) {
	clock := newClock()
	c := openCloud(t, sim.Config{Clock: clock, Faults: sim.Faults{
		RateLimits: map[string]sim.Bucket{sim.CallList: {Burst: 3, PerSecond: 2}},
	}})
	p := c.Provider(testController, testModel)
	ctx := context.Background()
	list := func() error { _, err := p.Instances(ctx); return err }
	for i := 0; i < 3; i++ {
		if err := list(); err != nil {
			t.Fatalf("call %d within burst: %v", i+1, err)
		}
	}
	err := list()
	if k, _ := kindOf(err); k != muster.ErrThrottled {
		t.Fatalf("call beyond burst: got %v, want throttled", err)
	}
	clock.Advance(499 * time.Millisecond)
	if k, _ := kindOf(list()); k != muster.ErrThrottled {
		t.Fatalf("before a token refilled: want throttled")
	}
	clock.Advance(time.Millisecond)
	if err := list(); err != nil {
		t.Fatalf("after one token refilled: %v", err)
	}
	// Other call kinds have their own (here unlimited) buckets.
	if _, err := p.Zones(ctx); err != nil {
		t.Fatalf("Zones: %v", err)
	}
	clock.Advance(time.Hour)
	for i := 0; i < 3; i++ {
		if err := list(); err != nil {
			t.Fatalf("after refill, call %d: %v", i+1, err)
		}
	}
	if k, _ := kindOf(list()); k != muster.ErrThrottled {
		t.Fatalf("refill exceeds burst: want throttled after 3 calls")
	}
	st := c.Stats()
	if st.Calls[sim.CallList] != 10 || st.Throttled[sim.CallList] != 3 || st.Calls[sim.CallZones] != 1 {
		t.Errorf("got calls %v throttled %v, want list 10, throttled 3, zones 1", st.Calls, st.Throttled)
	}
}

func TestInstanceBucketThrottlesBatches(t *testing.T) {
	clock := newClock()
	c := openCloud(t, sim.Config{Clock: clock, Faults: sim.Faults{InstanceRate: sim.Bucket{Burst: 5, PerSecond: 1}}})
	p := c.Provider(testController, testModel)
	batch := func(n int, prefix string) []muster.StartOutcome {
		var ps []muster.StartParams
		for i := 0; i < n; i++ {
			ps = append(ps, startParams(prefix+string(rune('a'+i)), ""))
		}
		return p.StartInstances(context.Background(), ps)
	}
	for i, o := range batch(4, "x") {
		if o.Err != nil {
			t.Fatalf("first batch, start %d: %v", i, o.Err)
		}
	}
	outs := batch(2, "y")
	for i, o := range outs {
		if k, _ := kindOf(o.Err); k != muster.ErrThrottled {
			t.Errorf("second batch, start %d: got %v, want throttled", i, o.Err)
		}
	}
	clock.Advance(time.Second)
	for i, o := range batch(2, "z") {
		if o.Err != nil {
			t.Fatalf("after refill, start %d: %v", i, o.Err)
		}
	}
	st := c.Stats()
	if st.Instances != 6 || st.Calls[sim.CallStart] != 3 || st.Throttled[sim.CallStart] != 1 {
		t.Errorf("got %d instances, %d start calls, %d throttled; want 6, 3, 1", st.Instances, st.Calls[sim.CallStart], st.Throttled[sim.CallStart])
	}
}

func TestBatchLimitAndPartialFailure(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock(), MaxBatch: 3})
	p := c.Provider(testController, testModel)
	if p.MaxBatch() != 3 {
		t.Fatalf("got MaxBatch %d, want 3", p.MaxBatch())
	}
	bad := startParams("1", "a")
	bad.Base = "nope@1"
	outs := p.StartInstances(context.Background(), []muster.StartParams{startParams("0", "a"), bad, startParams("2", "b")})
	if outs[0].Err != nil || outs[2].Err != nil || muster.ProviderErrorKindOf(outs[1].Err) != muster.ErrZoneIndependent {
		t.Fatalf("got errors %v, %v, %v; want nil, zone-independent, nil", outs[0].Err, outs[1].Err, outs[2].Err)
	}
	outs = p.StartInstances(context.Background(), make([]muster.StartParams, 4))
	for i, o := range outs {
		if o.Err == nil {
			t.Errorf("outcome %d of an oversized batch: got no error", i)
		}
	}
	if n := c.Stats().Instances; n != 2 {
		t.Errorf("got %d instances, want 2", n)
	}
}

func TestListingLag(t *testing.T) {
	clock := newClock()
	c := openCloud(t, sim.Config{Clock: clock, Faults: sim.Faults{ListingLag: 5 * time.Second}})
	p := c.Provider(testController, testModel)
	res := mustStart(t, p, startParams("0", "a"))
	count := func() int {
		insts, err := p.Instances(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(insts)
	}
	if n := count(); n != 0 {
		t.Fatalf("right after start got %d listed, want 0", n)
	}
	// The launch token still finds it.
	if again := mustStart(t, p, startParams("0", "a")); again.Instance.ID != res.Instance.ID {
		t.Fatalf("repeat start during lag gave %s, want %s", again.Instance.ID, res.Instance.ID)
	}
	clock.Advance(4 * time.Second)
	if n := count(); n != 0 {
		t.Fatalf("after 4s got %d listed, want 0", n)
	}
	clock.Advance(time.Second)
	if n := count(); n != 1 {
		t.Fatalf("after 5s got %d listed, want 1", n)
	}
}

func TestLatencyUsesClockAndHonoursContext(t *testing.T) {
	clock := newClock()
	c := openCloud(t, sim.Config{Clock: clock, Faults: sim.Faults{
		Latency: map[string]sim.Latency{sim.CallStart: {Fixed: 50 * time.Millisecond}},
	}})
	p := c.Provider(testController, testModel)
	done := make(chan error, 1)
	go func() {
		_, err := p.StartInstance(context.Background(), startParams("0", "a"))
		done <- err
	}()
	<-clock.WaitForTimers(1)
	if n := c.Stats().Instances; n != 0 {
		t.Fatalf("during latency got %d instances, want 0", n)
	}
	clock.Advance(50 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("start: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := p.StartInstance(ctx, startParams("1", "a"))
		done <- err
	}()
	<-clock.WaitForTimers(1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled start: got %v, want context.Canceled", err)
	}
	if n := c.Stats().Instances; n != 1 {
		t.Errorf("got %d instances, want 1 (the cancelled start adds none)", n)
	}
}

func TestSubnetsSpacesAndDeriveZones(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock(), Spaces: []sim.SpaceConfig{{Name: "alpha"}, {Name: "beta", Zones: []string{"b", "c"}}}})
	p := c.Provider(testController, testModel)
	ctx := context.Background()
	subnets, err := p.Subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range subnets {
		got = append(got, s.ID+" "+s.CIDR+" "+s.Zone+" "+s.Space)
	}
	want := []string{
		sim.SubnetID("a", "alpha") + " 10.1.0.0/17 a alpha",
		sim.SubnetID("b", "alpha") + " 10.2.0.0/17 b alpha",
		sim.SubnetID("b", "beta") + " 10.2.128.0/17 b beta",
		sim.SubnetID("c", "alpha") + " 10.3.0.0/17 c alpha",
		sim.SubnetID("c", "beta") + " 10.3.128.0/17 c beta",
	}
	for _, s := range subnets {
		if !regexp.MustCompile(`^subnet-[0-9a-f]{17}$`).MatchString(s.ID) {
			t.Errorf("subnet id %q is not shaped as EC2's (subnet- and 17 hex digits)", s.ID)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got subnets\n%v\nwant\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	beta := map[string][]string{sim.SubnetID("b", "beta"): {"b"}, sim.SubnetID("c", "beta"): {"c"}}
	alpha := map[string][]string{sim.SubnetID("a", "alpha"): {"a"}, sim.SubnetID("b", "alpha"): {"b"}, sim.SubnetID("c", "alpha"): {"c"}}
	tests := []struct {
		name    string
		p       muster.StartParams
		want    []string
		wantErr bool
	}{
		{"nothing", muster.StartParams{}, nil, false},
		{"placement", muster.StartParams{Placement: "zone=b"}, []string{"b"}, false},
		{"spaces", muster.StartParams{SubnetsToZones: []map[string][]string{alpha, beta}}, []string{"b", "c"}, false},
		{"placement and spaces", muster.StartParams{Placement: "zone=c", SubnetsToZones: []map[string][]string{beta}}, []string{"c"}, false},
		{"placement outside spaces", muster.StartParams{Placement: "zone=a", SubnetsToZones: []map[string][]string{beta}}, nil, true},
		{"unknown zone", muster.StartParams{Placement: "zone=z9"}, nil, true},
		{"bad placement", muster.StartParams{Placement: "host=x"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.DeriveZones(ctx, tt.p)
			if tt.wantErr {
				if !muster.IsZoneIndependent(err) {
					t.Fatalf("got %v, %v; want a zone-independent error", got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	sp := startParams("0", "c")
	sp.SubnetsToZones = []map[string][]string{alpha, beta}
	res := mustStart(t, p, sp)
	if len(res.Addresses) != 2 || !strings.HasPrefix(res.Addresses[0], "10.3.0.") || !strings.HasPrefix(res.Addresses[1], "10.3.128.") {
		t.Errorf("got addresses %v, want one in 10.3.0.0/17 and one in 10.3.128.0/17", res.Addresses)
	}
	sp = startParams("1", "a")
	sp.SubnetsToZones = []map[string][]string{beta}
	if _, err := p.StartInstance(ctx, sp); muster.IsZoneIndependent(err) || err == nil {
		t.Errorf("start in a zone without the space's subnet: got %v, want a zone-specific error", err)
	}
}

func TestAddressesUnique(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	p := c.Provider(testController, testModel)
	seen := map[string]bool{}
	var first muster.StartResult
	for i := 0; i < 300; i++ {
		res := mustStart(t, p, muster.StartParams{Zone: "a"})
		if i == 0 {
			first = res
		}
		if seen[res.Addresses[0]] {
			t.Fatalf("address %s given twice", res.Addresses[0])
		}
		seen[res.Addresses[0]] = true
	}
	if err := p.StopInstances(context.Background(), first.Instance.ID); err != nil {
		t.Fatal(err)
	}
	if n := c.RemoveInstances(first.Instance.ID); n != 0 {
		t.Errorf("RemoveInstances of a stopped instance removed %d, want 0", n)
	}
}

func TestPersistenceAcrossReopen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	var mu sync.Mutex
	var restarted []string
	clock := newClock()
	cfg := sim.Config{Clock: clock, StateFile: file}
	c := openCloud(t, cfg)
	p := c.Provider(testController, testModel)
	sp := startParams("0", "b")
	sp.Constraints = muster.MustParseConstraints("cores=4")
	kept := mustStart(t, p, sp)
	gone := mustStart(t, p, startParams("1", "a"))
	if err := p.StopInstances(context.Background(), gone.Instance.ID); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	foreign, err := c.AddInstance("c", "other-ctrl", testModel)
	if err != nil {
		t.Fatal(err)
	}
	no, eight := false, 8
	c.SetZone("c", sim.ZoneUpdate{Available: &no, Capacity: &eight})
	c.FailNext("a", 2)
	// No Close: every change is on disk already.
	cfg.OnStart = func(inst sim.Instance, p muster.StartParams) {
		mu.Lock()
		defer mu.Unlock()
		restarted = append(restarted, inst.ID+"/"+p.MachineID)
	}
	cfg.Zones = []sim.ZoneConfig{{Name: "ignored", Available: true}}
	c2 := openCloud(t, cfg)
	got := c2.AllInstances()
	if len(got) != 2 || got[0].ID != kept.Instance.ID || got[1].ID != foreign.ID {
		t.Fatalf("after reopen got %+v, want %s and %s", got, kept.Instance.ID, foreign.ID)
	}
	zs := c2.Zones()
	if len(zs) != 3 || zs[1].Used != 4 || zs[2].Available || zs[2].Capacity != 8 || zs[0].FailNext != 2 {
		t.Errorf("after reopen got zones %+v, want a (2 failures pending), b (4 used), c (unavailable, 8)", zs)
	}
	if want := []string{kept.Instance.ID + "/0"}; !reflect.DeepEqual(restarted, want) {
		t.Errorf("OnStart at reopen got %v, want %v", restarted, want)
	}
	// The launch token still maps to the kept instance.
	again := mustStart(t, c2.Provider(testController, testModel), sp)
	if again.Instance.ID != kept.Instance.ID {
		t.Errorf("repeat start after reopen gave %s, want %s", again.Instance.ID, kept.Instance.ID)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
	if matches, _ := filepath.Glob(file + ".tmp*"); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
}

func TestOpenRejectsBadStateFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(file, []byte("{not json"), 0o600)
	if _, err := sim.Open(sim.Config{StateFile: file}); muster.ErrorCode(err) != muster.EInvalid {
		t.Fatalf("got %v, want an invalid error", err)
	}
}

func TestHooksAndIsolation(t *testing.T) {
	var mu sync.Mutex
	var events []string
	clock := newClock()
	c := openCloud(t, sim.Config{
		Clock: clock,
		OnStart: func(inst sim.Instance, p muster.StartParams) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, "start "+p.MachineID+" "+p.Nonce)
		},
		OnStop: func(id string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, "stop")
		},
	})
	p := c.Provider(testController, testModel)
	sp := startParams("3", "a")
	sp.Nonce = "machine-0:abc"
	res := mustStart(t, p, sp)
	mustStart(t, p, sp) // idempotent: no second hook
	clock.Advance(time.Second)
	orphan, _ := c.AddInstance("a", testController, testModel)
	other, _ := c.AddInstance("a", testController, "model-2")
	insts, _ := p.Instances(context.Background())
	if len(insts) != 2 || insts[1].ID != orphan.ID || insts[1].MachineID != "" {
		t.Fatalf("got %+v, want our instance and the orphan (no machine)", insts)
	}
	if err := p.StopInstances(context.Background(), res.Instance.ID, other.ID, orphan.ID); err != nil {
		t.Fatal(err)
	}
	all := c.AllInstances()
	if len(all) != 1 || all[0].ID != other.ID {
		t.Fatalf("got %+v, want only the other model's instance left", all)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"start 3 machine-0:abc", "stop", "stop"}; !reflect.DeepEqual(events, want) {
		t.Errorf("got hook events %v, want %v", events, want)
	}
}

func TestSetFaultsRejectsBadValues(t *testing.T) {
	c := openCloud(t, sim.Config{})
	tests := []struct {
		name string
		f    sim.Faults
	}{
		{"rate above one", sim.Faults{ErrorRate: map[string]float64{sim.CallStart: 1.5}}},
		{"unknown kind", sim.Faults{ErrorRate: map[string]float64{"reboot": 0.1}}},
		{"negative latency", sim.Faults{Latency: map[string]sim.Latency{sim.CallList: {Fixed: -1}}}},
		{"negative burst", sim.Faults{InstanceRate: sim.Bucket{Burst: -1}}},
		{"negative lag", sim.Faults{ListingLag: -time.Second}},
		{"reply delay of unknown kind", sim.Faults{ReplyDelay: map[string]sim.Latency{"reboot": {Fixed: 1}}}},
		{"negative reply delay", sim.Faults{ReplyDelay: map[string]sim.Latency{sim.CallDescribe: {Jitter: -1}}}},
		{"lost replies of unknown kind", sim.Faults{LoseReplies: map[string]int{"reboot": 1}}},
		{"negative lost replies", sim.Faults{LoseReplies: map[string]int{sim.CallStart: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := c.SetFaults(tt.f); muster.ErrorCode(err) != muster.EInvalid {
				t.Errorf("got %v, want an invalid error", err)
			}
		})
	}
	if f := c.Faults(); !reflect.DeepEqual(f, sim.Faults{}) {
		t.Errorf("faults changed to %+v by rejected calls", f)
	}
}

func TestClientAdmin(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	srv := httptest.NewServer(sim.NewServer(c))
	t.Cleanup(srv.Close)
	cl := sim.NewClient(srv.URL, srv.Client())
	ctx := context.Background()
	two := 2
	zs, err := cl.SetZone(ctx, "d", sim.ZoneUpdate{Capacity: &two})
	if err != nil || zs.Name != "d" || !zs.Available || zs.Capacity != 2 || zs.Index != 3 {
		t.Fatalf("SetZone(d): got %+v, %v; want new zone d, available, capacity 2, index 3", zs, err)
	}
	f := sim.Faults{ListingLag: time.Second, RateLimits: map[string]sim.Bucket{sim.CallStart: {Burst: 10, PerSecond: 50}}}
	if err := cl.SetFaults(ctx, f); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Faults(ctx); err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("Faults: got %+v, %v; want %+v", got, err, f)
	}
	if err := cl.SetFaults(ctx, sim.Faults{ErrorRate: map[string]float64{"x": 2}}); muster.ErrorCode(err) != muster.EInvalid {
		t.Fatalf("SetFaults(bad): got %v, want invalid", err)
	}
	if err := cl.FailNext(ctx, "d", 1); err != nil {
		t.Fatal(err)
	}
	inst, err := cl.AddInstance(ctx, "d", "c1", "m1")
	if err != nil || inst.Zone != "d" || inst.Controller() != "c1" {
		t.Fatalf("AddInstance: got %+v, %v", inst, err)
	}
	if _, err := cl.AddInstance(ctx, "nowhere", "c1", "m1"); muster.ErrorCode(err) != muster.ENotFound {
		t.Fatalf("AddInstance(unknown zone): got %v, want not-found", err)
	}
	all, err := cl.Instances(ctx)
	if err != nil || len(all) != 1 || all[0].ID != inst.ID {
		t.Fatalf("Instances: got %+v, %v", all, err)
	}
	if _, err := cl.Provider("c1", "m1").Zones(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Stats(ctx)
	if err != nil || st.Instances != 1 || st.Calls[sim.CallZones] != 1 || st.InstancesByZone["d"] != 1 {
		t.Fatalf("Stats: got %+v, %v", st, err)
	}
	if n, err := cl.RemoveInstances(ctx, inst.ID, "i-unknown"); err != nil || n != 1 {
		t.Fatalf("RemoveInstances: got %d, %v; want 1", n, err)
	}
	if err := cl.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := cl.Stats(ctx); st.Calls[sim.CallZones] != 0 || st.InstancesStopped != 0 {
		t.Errorf("after reset got %+v", st)
	}
	if got := cl.Provider("c1", "m1").MaxBatch(); got != sim.DefaultMaxBatch {
		t.Errorf("MaxBatch over HTTP: got %d, want %d", got, sim.DefaultMaxBatch)
	}
}

func TestClientUnreachableIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(nil)
	url := srv.URL
	srv.Close()
	_, err := sim.NewClient(url, nil).Provider("c", "m").Instances(context.Background())
	if k, _ := kindOf(err); k != muster.ErrUnavailable {
		t.Fatalf("got %v, want an unavailable provider error", err)
	}
}

// instancesInFile counts the instances in a state file: those of the
// snapshot on its first line, plus those put, less those deleted, by the
// records after it.
func instancesInFile(tb testing.TB, file string) int {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var st struct {
		Instances []struct {
			ID string `json:"id"`
		} `json:"instances"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &st); err != nil {
		tb.Fatal(err)
	}
	ids := map[string]bool{}
	for _, in := range st.Instances {
		ids[in.ID] = true
	}
	for _, l := range lines[1:] {
		var rec struct {
			Put *struct {
				ID string `json:"id"`
			} `json:"put"`
			Del string `json:"del"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			tb.Fatal(err)
		}
		if rec.Put != nil {
			ids[rec.Put.ID] = true
		}
		delete(ids, rec.Del)
	}
	return len(ids)
}

func TestSaveDelayBatchesWrites(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	clock := newClock()
	c, err := sim.Open(sim.Config{Clock: clock, StateFile: file, SaveDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Provider(testController, testModel)
	mustStart(t, p, startParams("0", "a"))
	<-clock.WaitForTimers(1)
	if n := instancesInFile(t, file); n != 0 {
		t.Fatalf("before the delay got %d instances on disk, want 0", n)
	}
	clock.Advance(time.Second)
	testutil.Eventually(t, "instance written after the delay", func() bool { return instancesInFile(t, file) == 1 })
	mustStart(t, p, startParams("1", "a"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := instancesInFile(t, file); n != 2 {
		t.Fatalf("after Close got %d instances on disk, want 2", n)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestStateFileJournal(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	c := openCloud(t, sim.Config{Clock: newClock(), StateFile: file})
	p := c.Provider(testController, testModel)
	ctx := context.Background()
	kept := mustStart(t, p, startParams("keep", "a"))
	for i := 0; i < 1500; i++ {
		res := mustStart(t, p, muster.StartParams{Zone: "b"})
		if err := p.StopInstances(ctx, res.Instance.ID); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines > 1100 {
		t.Errorf("state file has %d lines after 3000 changes, want it compacted (at most 1100)", lines)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		tail    string
		wantErr bool
	}{
		{"torn last line ignored", `{"put":{"id":"i-torn","zo`, false},
		{"bad line in the middle", "{nonsense}\n{\"del\":\"x\"}\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f2 := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(f2, append(append([]byte(nil), b...), tt.tail...), 0o600); err != nil {
				t.Fatal(err)
			}
			c2, err := sim.Open(sim.Config{StateFile: f2})
			if tt.wantErr {
				if muster.ErrorCode(err) != muster.EInvalid {
					t.Fatalf("got %v, want an invalid error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			all := c2.AllInstances()
			if len(all) != 1 || all[0].ID != kept.Instance.ID {
				t.Fatalf("got %d instances, want only %s", len(all), kept.Instance.ID)
			}
			if zs := c2.Zones(); zs[0].Used != 1 || zs[1].Used != 0 {
				t.Errorf("got zones %+v, want 1 core used in a, none in b", zs)
			}
		})
	}
}

func TestLoseRepliesOfTheSimsOwnCalls(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	srv := httptest.NewServer(sim.NewServer(c))
	defer srv.Close()
	client := sim.NewClient(srv.URL, srv.Client())
	ctx := context.Background()
	// Set through the admin API, as JSON.
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/admin/faults", strings.NewReader(`{"lose-replies": {"start": 2}, "reply-delay": {"zones": {"fixed": 0}}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if f := c.Faults(); f.LoseReplies[sim.CallStart] != 2 || len(f.ReplyDelay) != 1 {
		t.Fatalf("faults after PUT: %+v", f)
	}
	sp := startParams("0", "a")
	for name, p := range map[string]muster.Provider{"in-process": c.Provider(testController, testModel), "http": client.Provider(testController, testModel)} {
		_, err := p.StartInstance(ctx, sp)
		if k, _ := kindOf(err); k != muster.ErrUnavailable {
			t.Errorf("%s: got %v, want an unavailable error", name, err)
		}
	}
	// The first lost start did start it; the second found it by its token.
	res := mustStart(t, client.Provider(testController, testModel), sp)
	if all := c.AllInstances(); len(all) != 1 || all[0].ID != res.Instance.ID || c.Stats().InstancesStarted != 1 {
		t.Errorf("got %+v, want the one instance %s", all, res.Instance.ID)
	}
	for _, bad := range []string{`{"lose-replies": {"reboot": 1}}`, `{"lose-replies": {"start": -1}}`, `{"reply-delay": {"list": {"fixed": -5}}}`} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/admin/faults", strings.NewReader(bad))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: got status %d, want 400", bad, resp.StatusCode)
		}
	}
}
