package ec2

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// params are start params of a machine of p's model in zone, without an
// agent.
func params(p *Provider, machine, zone string) muster.StartParams {
	token := muster.NewSecret()
	return muster.StartParams{
		ControllerUUID: p.controller, ModelUUID: p.model, MachineID: machine,
		Zone: zone, Base: "ubuntu@24.04", Arch: "amd64", LaunchToken: token, Nonce: "machine-0:" + muster.NewUUID(),
		Tags: map[string]string{
			muster.TagController: p.controller, muster.TagModel: p.model,
			muster.TagMachine: machine, muster.TagLaunchToken: token,
		},
	}
}

// withAgent adds an agent config and binary to sp, as the provisioner does.
func withAgent(tb testing.TB, sp muster.StartParams) muster.StartParams {
	tb.Helper()
	a := agentParams(tb, sp.MachineID, "https://10.0.0.10:17070/agent-binaries/1.0.0/linux/amd64", fakeSHA)
	var cfg muster.AgentConfig
	if err := json.Unmarshal(a.UserData, &cfg); err != nil {
		tb.Fatal(err)
	}
	cfg.Controller, cfg.Model = sp.ControllerUUID, sp.ModelUUID
	sp.UserData, _ = json.Marshal(cfg)
	sp.Password, sp.Nonce = cfg.Password, cfg.Nonce
	sp.AgentBinaries = a.AgentBinaries
	return sp
}

func wantKind(tb testing.TB, what string, err error, kind muster.ProviderErrorKind, zone string) {
	tb.Helper()
	var pe *muster.ProviderError
	if !errors.As(err, &pe) {
		tb.Fatalf("%s: got %v, want a %s error", what, err, kind)
	}
	if pe.Kind != kind || pe.Zone != zone {
		tb.Errorf("%s: got kind %s zone %q, want %s zone %q (%v)", what, pe.Kind, pe.Zone, kind, zone, err)
	}
}

func simInstance(tb testing.TB, c *sim.Cloud, id string) (sim.Instance, bool) {
	tb.Helper()
	for _, in := range c.AllInstances() {
		if in.ID == id {
			return in, true
		}
	}
	return sim.Instance{}, false
}

func TestStartResult(t *testing.T) {
	s := newSimEC2(t, nil)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	ctx := testCtx(t)
	sp := withAgent(t, params(p, "3", "us-east-1b"))
	sp.Constraints = muster.MustParseConstraints("cores=2 root-disk=20000M")
	sp.Volumes = []muster.Volume{{Name: "data", Size: 10 << 10}, {Name: "logs", Size: 1 << 10, Pool: "gp2"}}
	sp.Attachments = []muster.VolumeAttachment{{Volume: "data", MachineID: "3"}, {Volume: "logs", MachineID: "3"}}
	res, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Instance.ID
	if !strings.HasPrefix(id, "i-") || res.DisplayName != id+" (s1.medium)" {
		t.Errorf("instance %q, display name %q; want i-… and \"i-… (s1.medium)\"", id, res.DisplayName)
	}
	want := muster.Hardware{Arch: "amd64", Cores: 2, Mem: 4 << 10, RootDisk: 20 << 10, AvailabilityZone: "us-east-1b"}
	if res.Hardware != want {
		t.Errorf("hardware %+v, want %+v", res.Hardware, want)
	}
	if res.Instance.Zone != "us-east-1b" || res.Instance.MachineID != "3" || res.Instance.LaunchToken != sp.LaunchToken || res.Instance.Created.IsZero() {
		t.Errorf("instance %+v", res.Instance)
	}
	if res.Instance.Tags[TagName] == "" || res.Instance.Tags[muster.TagMachine] != "3" {
		t.Errorf("tags %v", res.Instance.Tags)
	}
	subs, err := p.Subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Addresses) != 1 || !inZoneSubnet(subs, "us-east-1b", res.Addresses[0]) {
		t.Errorf("addresses %v, want one in a subnet of us-east-1b (%v)", res.Addresses, subs)
	}
	if len(res.Volumes) != 2 || len(res.Attachments) != 2 {
		t.Fatalf("volumes %+v, attachments %+v", res.Volumes, res.Attachments)
	}
	for i, w := range []struct{ name, dev string }{{"data", "/dev/sdf"}, {"logs", "/dev/sdg"}} {
		v, a := res.Volumes[i], res.Attachments[i]
		if v.Name != w.name || !strings.HasPrefix(v.VolumeID, "vol-") || a.Volume != w.name || a.DeviceName != w.dev || a.InstanceID != id || a.MachineID != "3" {
			t.Errorf("volume %d: %+v attached %+v; want %s with a vol- id on %s of %s", i, v, a, w.name, w.dev, id)
		}
	}
	si, ok := simInstance(t, s.cloud, id)
	if !ok {
		t.Fatalf("the sim has no instance %s", id)
	}
	if si.RootDisk != 20<<10 || si.InstanceType != "s1.medium" || si.Zone != "us-east-1b" {
		t.Errorf("sim instance: root disk %d, type %s, zone %s", si.RootDisk, si.InstanceType, si.Zone)
	}
	var simVols []string
	for _, v := range si.Volumes {
		simVols = append(simVols, v.VolumeID)
	}
	for _, v := range res.Volumes {
		if !slices.Contains(simVols, v.VolumeID) {
			t.Errorf("volume %s (%s) is not the sim's (%v)", v.Name, v.VolumeID, simVols)
		}
	}
	if si.Tags[muster.TagLaunchToken] != sp.LaunchToken || si.Tags[muster.TagController] != p.controller {
		t.Errorf("sim instance tags %v", si.Tags)
	}
	// The user data the instance got is the agent's cloud-config.
	ud := userDataOf(t, p, id)
	cc := parseCloudConfig(t, ud)
	if f, ok := fileOf(cc, agentConfigPath); !ok || !strings.Contains(f.Content, sp.Password) {
		t.Errorf("user data has no agent config with the password:\n%s", ud)
	}
}

func inZoneSubnet(subs []muster.Subnet, zone, addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	for _, s := range subs {
		if pfx, err := netip.ParsePrefix(s.CIDR); err == nil && s.Zone == zone && pfx.Contains(a) {
			return true
		}
	}
	return false
}

func userDataOf(tb testing.TB, p *Provider, id string) []byte {
	tb.Helper()
	ls, err := p.client.DescribeInstanceAttribute(testCtx(tb), describeUserData(id))
	if err != nil {
		tb.Fatal(err)
	}
	b, err := decodeUserData(ls.UserData)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestSpacesChooseTheSubnet(t *testing.T) {
	s := newSimEC2(t, nil)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	ctx := testCtx(t)
	subs, err := p.Subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	beta := map[string][]string{}
	for _, sub := range subs {
		if sub.Space == "beta" {
			beta[sub.ID] = []string{sub.Zone}
		}
	}
	if len(beta) != len(testZones) {
		t.Fatalf("space beta has subnets %v, want one per zone", beta)
	}
	sp := params(p, "0", "us-east-1c")
	sp.SubnetsToZones = []map[string][]string{beta}
	zones, err := p.DeriveZones(ctx, sp)
	if err != nil || !slices.Equal(zones, testZones) {
		t.Errorf("DeriveZones(space beta) = %v, %v; want %v", zones, err, testZones)
	}
	res, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	var betaC []muster.Subnet
	for _, sub := range subs {
		if sub.Space == "beta" && sub.Zone == "us-east-1c" {
			betaC = append(betaC, sub)
		}
	}
	if len(res.Addresses) != 1 || !inZoneSubnet(betaC, "us-east-1c", res.Addresses[0]) {
		t.Errorf("addresses %v, want one in space beta's subnet of us-east-1c %v", res.Addresses, betaC)
	}
}

// TestClientTokenIdempotency: the same launch token twice gives the same
// instance, and the cloud started one.
func TestClientTokenIdempotency(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	sp := params(p, "0", "us-east-1a")
	first, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh provider (a restarted controller) repeats the start.
	second, err := s.provider(t, p.controller, p.model).StartInstance(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if second.Instance.ID != first.Instance.ID {
		t.Errorf("second start gave %s, want %s", second.Instance.ID, first.Instance.ID)
	}
	if n := s.cloud.Stats().InstancesStarted; n != 1 {
		t.Errorf("the sim started %d instances, want 1", n)
	}
	// The same token in another zone is another launch: EC2 refuses it.
	sp.Zone = "us-east-1b"
	_, err = p.StartInstance(ctx, sp)
	wantKind(t, "same token, other subnet", err, muster.ErrZoneIndependent, "")
	if err != nil && !strings.Contains(err.Error(), "IdempotentParameterMismatch") {
		t.Errorf("got %v, want IdempotentParameterMismatch", err)
	}
}

// TestTerminatedTokenNeedsANewToken: a launch token whose instance was
// terminated does not give that instance back as a started one.
func TestTerminatedTokenNeedsANewToken(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	sp := params(p, "0", "us-east-1a")
	res, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.StopInstances(ctx, res.Instance.ID); err != nil {
		t.Fatal(err)
	}
	_, err = p.StartInstance(ctx, sp)
	wantKind(t, "start with a terminated instance's token", err, muster.ErrUnavailable, "us-east-1a")
	sp.LaunchToken = muster.NewSecret()
	sp.Tags[muster.TagLaunchToken] = sp.LaunchToken
	again, err := p.StartInstance(ctx, sp)
	if err != nil || again.Instance.ID == res.Instance.ID {
		t.Errorf("start with a new token: got %v, %v; want a new instance", again.Instance.ID, err)
	}
}

// TestLostReplyRetried: RunInstances does its work and the reply is lost;
// the SDK retries with the same ClientToken and gets the same instance.
func TestLostReplyRetried(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	sp := params(p, "0", "us-east-1a")
	if _, err := p.instanceTypes(ctx); err != nil { // catalogue calls out of the way
		t.Fatal(err)
	}
	s.setFaults(t, func(f *sim.Faults) { f.LoseReplies = map[string]int{sim.CallStart: 1} })
	s.cloud.ResetStats()
	res, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatalf("start with a lost reply: %v", err)
	}
	st := s.cloud.Stats()
	if st.InstancesStarted != 1 || st.Calls[sim.CallStart] != 2 {
		t.Errorf("the sim started %d instances in %d RunInstances, want 1 in 2", st.InstancesStarted, st.Calls[sim.CallStart])
	}
	insts := s.cloud.AllInstances()
	if len(insts) != 1 || insts[0].ID != res.Instance.ID {
		t.Errorf("sim instances %v, want only %s", insts, res.Instance.ID)
	}
}

// TestThrottledAtOnce: a throttled call comes back at once as ErrThrottled,
// without the SDK trying again (muster has its own limiter).
func TestThrottledAtOnce(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	if _, err := p.StartInstance(ctx, params(p, "0", "us-east-1a")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		fault func(*sim.Faults)
	}{
		{"request bucket", func(f *sim.Faults) {
			f.RateLimits = map[string]sim.Bucket{sim.CallStart: {Burst: 1, PerSecond: 1e-6}, sim.CallList: {Burst: 1, PerSecond: 1e-6}}
		}},
		{"instance bucket", func(f *sim.Faults) { f.InstanceRate = sim.Bucket{Burst: 1, PerSecond: 1e-6} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s.setFaults(t, tt.fault)
			if _, err := p.StartInstance(ctx, params(p, "1", "us-east-1a")); err != nil { // takes the one token
				t.Fatal(err)
			}
			s.cloud.ResetStats()
			_, err := p.StartInstance(ctx, params(p, "2", "us-east-1a"))
			wantKind(t, "throttled start", err, muster.ErrThrottled, "")
			st := s.cloud.Stats()
			if st.Calls[sim.CallStart] != 1 || st.Throttled[sim.CallStart] != 1 {
				t.Errorf("RunInstances calls %d, throttled %d; want 1 and 1 (no retries)", st.Calls[sim.CallStart], st.Throttled[sim.CallStart])
			}
		})
	}
	s.setFaults(t, func(f *sim.Faults) { f.RateLimits = map[string]sim.Bucket{sim.CallList: {Burst: 1, PerSecond: 1e-6}} })
	p.Instances(ctx)
	s.cloud.ResetStats()
	_, err := p.Instances(ctx)
	wantKind(t, "throttled listing", err, muster.ErrThrottled, "")
	if n := s.cloud.Stats().Calls[sim.CallList]; n != 1 {
		t.Errorf("DescribeInstances calls %d, want 1", n)
	}
}

// TestServerErrorsRetried: InternalError is retried by the SDK (three
// attempts), then comes back as ErrUnavailable.
func TestServerErrorsRetried(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	s.setFaults(t, func(f *sim.Faults) { f.ErrorRate = map[string]float64{sim.CallZones: 1} })
	_, err := p.Zones(ctx)
	wantKind(t, "zones with every call failing", err, muster.ErrUnavailable, "")
	if err != nil && !strings.Contains(err.Error(), "InternalError") {
		t.Errorf("got %v, want InternalError", err)
	}
	if n := s.cloud.Stats().Calls[sim.CallZones]; n != 3 {
		t.Errorf("DescribeAvailabilityZones attempts %d, want 3", n)
	}
}

// TestCapacityErrorCarriesZone: a zone out of capacity fails the start at
// once with a capacity error of that zone, and the next zone works.
func TestCapacityErrorCarriesZone(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	if err := s.cloud.FailNext("us-east-1b", 1); err != nil {
		t.Fatal(err)
	}
	sp := params(p, "0", "us-east-1b")
	if _, err := p.instanceTypes(ctx); err != nil {
		t.Fatal(err)
	}
	s.cloud.ResetStats()
	_, err := p.StartInstance(ctx, sp)
	wantKind(t, "start in a full zone", err, muster.ErrCapacity, "us-east-1b")
	if err != nil && !strings.Contains(err.Error(), "InsufficientInstanceCapacity") {
		t.Errorf("got %v, want InsufficientInstanceCapacity", err)
	}
	if n := s.cloud.Stats().Calls[sim.CallStart]; n != 1 {
		t.Errorf("RunInstances calls %d, want 1 (no retries)", n)
	}
	sp.Zone = "us-east-1c"
	if res, err := p.StartInstance(ctx, sp); err != nil || res.Instance.Zone != "us-east-1c" {
		t.Errorf("start in the next zone: %v, %v", res.Instance.Zone, err)
	}
}

func TestWrongCredentials(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	for name, creds := range map[string]credentials.StaticCredentialsProvider{
		"bad secret":  credentials.NewStaticCredentialsProvider(sim.DefaultEC2AccessKey, "wrong", ""),
		"unknown key": credentials.NewStaticCredentialsProvider("AKIAUNKNOWN", sim.DefaultEC2SecretKey, ""),
	} {
		p, err := Open(ctx, Config{Region: "us-east-1", Endpoint: s.endpoint, Credentials: creds}, "c", "m")
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Zones(ctx)
		wantKind(t, name, err, muster.ErrZoneIndependent, "")
	}
	// No credentials at all (TestMain empties the chain).
	p, err := Open(ctx, Config{Region: "us-east-1", Endpoint: s.endpoint}, "c", "m")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Zones(ctx)
	wantKind(t, "no credentials", err, muster.ErrZoneIndependent, "")
	t.Logf("without credentials: %v", err)
}

// TestBatch: one RunInstances starts a batch; results map to params by
// launch index; a fresh provider (a restarted controller) lists the
// instances with their machines and launch tokens from the user data.
func TestBatch(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	var ps []muster.StartParams
	for i := 0; i < 5; i++ {
		ps = append(ps, withAgent(t, params(p, strconv.Itoa(10+i), "us-east-1a")))
	}
	if _, err := p.instanceTypes(ctx); err != nil {
		t.Fatal(err)
	}
	s.cloud.ResetStats()
	outs := p.StartInstances(ctx, ps)
	if n := s.cloud.Stats().Calls[sim.CallStart]; n != 1 {
		t.Errorf("RunInstances calls %d (the provider made %d), want 1", n, p.callCounts()["RunInstances"])
	}
	byID := map[string]sim.Instance{}
	for _, in := range s.cloud.AllInstances() {
		byID[in.ID] = in
	}
	var ids []string
	for i, o := range outs {
		if o.Err != nil {
			t.Fatalf("outcome %d: %v", i, o.Err)
		}
		in := o.Result.Instance
		si := byID[in.ID]
		if si.EC2 == nil || si.EC2.LaunchIndex != i {
			t.Errorf("outcome %d is instance %s of launch index %+v, want %d", i, in.ID, si.EC2, i)
		}
		if in.MachineID != ps[i].MachineID || in.LaunchToken != ps[i].LaunchToken || in.Tags[muster.TagMachine] != ps[i].MachineID {
			t.Errorf("outcome %d: machine %q token %q, want %q %q", i, in.MachineID, in.LaunchToken, ps[i].MachineID, ps[i].LaunchToken)
		}
		if _, ok := si.Tags[muster.TagMachine]; ok || si.Tags[TagBatch] == "" {
			t.Errorf("batch instance tags %v: want %s and no machine tag", si.Tags, TagBatch)
		}
		ids = append(ids, in.ID)
	}
	// The same batch again (a retry after a lost reply) is the same
	// reservation.
	again := p.StartInstances(ctx, ps)
	for i, o := range again {
		if o.Err != nil || o.Result.Instance.ID != ids[i] {
			t.Errorf("repeated batch outcome %d: %v %v, want %s", i, o.Result.Instance.ID, o.Err, ids[i])
		}
	}
	if n := s.cloud.Stats().InstancesStarted; n != 5 {
		t.Errorf("the sim started %d instances, want 5", n)
	}

	// A second batch, in another zone: another reservation.
	var ps2 []muster.StartParams
	for i := 0; i < 3; i++ {
		ps2 = append(ps2, params(p, strconv.Itoa(20+i), "us-east-1b"))
	}
	for i, o := range p.StartInstances(ctx, ps2) {
		if o.Err != nil {
			t.Fatalf("second batch outcome %d: %v", i, o.Err)
		}
		ps = append(ps, ps2[i])
		ids = append(ids, o.Result.Instance.ID)
	}

	fresh := s.provider(t, p.controller, p.model)
	for round := 0; round < 2; round++ {
		insts, err := fresh.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]muster.Instance{}
		for _, in := range insts {
			got[in.ID] = in
		}
		for i, id := range ids {
			if got[id].MachineID != ps[i].MachineID || got[id].LaunchToken != ps[i].LaunchToken {
				t.Errorf("round %d: listed %s as machine %q token %q, want %q %q", round, id, got[id].MachineID, got[id].LaunchToken, ps[i].MachineID, ps[i].LaunchToken)
			}
		}
	}
	if n := fresh.callCounts()["DescribeInstanceAttribute"]; n != 2 {
		t.Errorf("DescribeInstanceAttribute calls %d over two listings, want 2 (one per reservation, cached)", n)
	}
	if n := p.callCounts()["DescribeInstanceAttribute"]; n != 0 {
		t.Errorf("the provider that started the batches read their user data %d times, want 0", n)
	}
	// Each instance's boot script picks its own config by launch index:
	// the user data holds every machine's at its index.
	ls, err := parseLaunches(userDataOf(t, p, ids[3]))
	if err != nil || ls[3].Machine != ps[3].MachineID {
		t.Errorf("user data launches %v, %v", ls, err)
	}
}

// TestBatchPartial: a zone with room for fewer instances than asked
// launches what fits; the rest get a capacity error of the zone.
func TestBatchPartial(t *testing.T) {
	s := newSimEC2(t, func(c *sim.Config) {
		c.Zones = []sim.ZoneConfig{{Name: "us-east-1a", Available: true, Capacity: 2}, {Name: "us-east-1b", Available: true, Capacity: sim.Unlimited}}
	})
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	var ps []muster.StartParams
	for i := 0; i < 3; i++ {
		ps = append(ps, params(p, strconv.Itoa(i), "us-east-1a"))
	}
	outs := p.StartInstances(ctx, ps)
	for i := 0; i < 2; i++ {
		if outs[i].Err != nil {
			t.Errorf("outcome %d: %v", i, outs[i].Err)
		}
	}
	wantKind(t, "outcome 2", outs[2].Err, muster.ErrCapacity, "us-east-1a")
	// A batch that cannot launch anything fails as a whole.
	outs = p.StartInstances(ctx, []muster.StartParams{params(p, "3", "us-east-1a"), params(p, "4", "us-east-1a")})
	for i, o := range outs {
		wantKind(t, "outcome "+strconv.Itoa(i)+" in a full zone", o.Err, muster.ErrCapacity, "us-east-1a")
	}
}

// TestBatchMixed: params of different shapes go in separate calls, and a
// bad one fails alone.
func TestBatchMixed(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	ps := []muster.StartParams{
		params(p, "0", "us-east-1a"), params(p, "1", "us-east-1b"), params(p, "2", "us-east-1a"),
		params(p, "3", "us-east-1a"), params(p, "4", "us-east-1a"),
	}
	ps[3].Constraints = muster.MustParseConstraints("cores=1000")
	ps[4].Constraints = muster.MustParseConstraints("mem=16G")
	outs := p.StartInstances(ctx, ps)
	wantKind(t, "unfittable", outs[3].Err, muster.ErrZoneIndependent, "")
	for _, i := range []int{0, 1, 2, 4} {
		if outs[i].Err != nil {
			t.Fatalf("outcome %d: %v", i, outs[i].Err)
		}
		if z := outs[i].Result.Instance.Zone; z != ps[i].Zone {
			t.Errorf("outcome %d in zone %s, want %s", i, z, ps[i].Zone)
		}
	}
	if got := outs[4].Result.DisplayName; !strings.HasSuffix(got, "(s1.large)") {
		t.Errorf("mem=16G started %s, want s1.large", got)
	}
	if n := p.callCounts()["RunInstances"]; n != 3 {
		t.Errorf("RunInstances calls %d, want 3 (0+2 together, 1 and 4 alone)", n)
	}
}

// TestStopOnlyOwn: StopInstances never terminates another model's or an
// untagged instance, even when its id is passed, also from a provider that
// did not start its own (a restarted controller).
func TestStopOnlyOwn(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	controller := muster.NewUUID()
	p := s.provider(t, controller, muster.NewUUID())
	other := s.provider(t, controller, muster.NewUUID())
	mine, err := p.StartInstance(ctx, params(p, "0", "us-east-1a"))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.StartInstance(ctx, params(other, "0", "us-east-1a"))
	if err != nil {
		t.Fatal(err)
	}
	untagged, err := s.cloud.CreateInstance(sim.NewInstance{Zone: "us-east-1b"})
	if err != nil {
		t.Fatal(err)
	}
	fresh := s.provider(t, p.controller, p.model)
	if err := fresh.StopInstances(ctx, theirs.Instance.ID, untagged.ID, mine.Instance.ID, "i-0123456789abcdef0"); err != nil {
		t.Fatal(err)
	}
	if _, ok := simInstance(t, s.cloud, mine.Instance.ID); ok {
		t.Errorf("own instance %s not terminated", mine.Instance.ID)
	}
	for _, id := range []string{theirs.Instance.ID, untagged.ID} {
		if _, ok := simInstance(t, s.cloud, id); !ok {
			t.Errorf("foreign instance %s was terminated", id)
		}
	}
	// Stopping again is a no-op: the instance is terminated.
	s.cloud.ResetStats()
	if err := fresh.StopInstances(ctx, mine.Instance.ID); err != nil {
		t.Fatal(err)
	}
	if n := s.cloud.Stats().Calls[sim.CallStop]; n != 0 {
		t.Errorf("TerminateInstances calls %d for a terminated instance, want 0", n)
	}
}

// TestStopDropsVanished: an instance this provider started that is gone
// by the time it is stopped (EC2's InvalidInstanceID.NotFound) is dropped
// and the others are terminated.
func TestStopDropsVanished(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	var ids []string
	for i := 0; i < 3; i++ {
		res, err := p.StartInstance(ctx, params(p, strconv.Itoa(i), "us-east-1a"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Instance.ID)
	}
	if n := s.cloud.RemoveInstances(ids[1]); n != 1 {
		t.Fatalf("removed %d", n)
	}
	// The sim keeps a terminated instance listed for an hour; one that
	// never existed is what EC2 does not know.
	p.mu.Lock()
	p.own["i-00000000000000000"] = p.now()
	p.mu.Unlock()
	if err := p.StopInstances(ctx, append(ids, "i-00000000000000000")...); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, ok := simInstance(t, s.cloud, id); ok {
			t.Errorf("instance %s not terminated", id)
		}
	}
}

// TestInstancesPaginates lists more instances than one page holds.
func TestInstancesPaginates(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	p.pageSize = 5
	want := map[string]bool{}
	for i := 0; i < 12; i++ {
		in, err := s.cloud.CreateInstance(sim.NewInstance{Zone: testZones[i%3], Controller: p.controller, Model: p.model, MachineID: strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		want[in.ID] = true
	}
	// Others' instances are not listed.
	if _, err := s.cloud.CreateInstance(sim.NewInstance{Zone: "us-east-1a", Controller: p.controller, Model: "other"}); err != nil {
		t.Fatal(err)
	}
	insts, err := p.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != len(want) {
		t.Errorf("listed %d instances, want %d", len(insts), len(want))
	}
	for _, in := range insts {
		if !want[in.ID] || in.State != "running" || in.Created.IsZero() || in.MachineID == "" {
			t.Errorf("listed %+v", in)
		}
	}
	if n := p.callCounts()["DescribeInstances"]; n != 3 {
		t.Errorf("DescribeInstances calls %d, want 3 pages of 5", n)
	}
}

// TestCallsPerStart measures the calls a start makes: the first looks the
// catalogue up, later ones make one call, RunInstances.
func TestCallsPerStart(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	if _, err := p.StartInstance(ctx, params(p, "0", "us-east-1a")); err != nil {
		t.Fatal(err)
	}
	first := p.callCounts()
	const n = 20
	for i := 1; i <= n; i++ {
		if _, err := p.StartInstance(ctx, params(p, strconv.Itoa(i), testZones[i%3])); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, v := range first {
		total += v
	}
	after := p.callCounts()
	t.Logf("first start: %d calls %v; then %d starts: %d RunInstances, %d calls in all", total, first, n,
		after["RunInstances"]-first["RunInstances"], sum(after)-total)
	want := map[string]int{"DescribeInstanceTypes": 1, "DescribeImages": 1, "DescribeSubnets": 1, "RunInstances": 1}
	for k, v := range want {
		if first[k] != v {
			t.Errorf("first start: %d %s, want %d", first[k], k, v)
		}
	}
	if got := sum(after) - total; got != n {
		t.Errorf("%d starts after the first made %d calls, want %d: %v", n, got, n, after)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// BenchmarkStartInstance reports the calls per start in steady state.
func BenchmarkStartInstance(b *testing.B) {
	s := newSimEC2(b, nil)
	ctx := context.Background()
	p := s.provider(b, muster.NewUUID(), muster.NewUUID())
	if _, err := p.StartInstance(ctx, params(p, "warm", "us-east-1a")); err != nil {
		b.Fatal(err)
	}
	before := sum(p.callCounts())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.StartInstance(ctx, params(p, strconv.Itoa(i), testZones[i%3])); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sum(p.callCounts())-before)/float64(b.N), "calls/start")
}

// TestUnavailableZone: a zone the cloud has taken out is listed as not
// available, and a start there fails with a capacity error of the zone.
func TestUnavailableZone(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	off := false
	if _, err := s.cloud.SetZone("us-east-1c", sim.ZoneUpdate{Available: &off}); err != nil {
		t.Fatal(err)
	}
	zones, err := p.Zones(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []muster.Zone{{Name: "us-east-1a", Available: true}, {Name: "us-east-1b", Available: true}, {Name: "us-east-1c", Available: false}}
	if !slices.Equal(zones, want) {
		t.Errorf("zones %v, want %v", zones, want)
	}
	_, err = p.StartInstance(ctx, params(p, "0", "us-east-1c"))
	wantKind(t, "start in an unavailable zone", err, muster.ErrCapacity, "us-east-1c")
	// A placement in a zone the region does not have is refused.
	_, err = p.DeriveZones(ctx, muster.StartParams{Placement: "zone=us-east-1x"})
	wantKind(t, "placement in an unknown zone", err, muster.ErrZoneIndependent, "")
}

// TestStartWithoutZone: without a chosen zone the start goes to the
// placement zone, else the first available zone the constraints allow.
func TestStartWithoutZone(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	for _, tt := range []struct {
		placement, cons, want string
	}{
		{"zone=us-east-1b", "", "us-east-1b"},
		{"", "zones=us-east-1c", "us-east-1c"},
		{"", "", "us-east-1a"},
	} {
		sp := params(p, "0", "")
		sp.Placement, sp.Constraints = tt.placement, muster.MustParseConstraints(tt.cons)
		res, err := p.StartInstance(ctx, sp)
		if err != nil || res.Instance.Zone != tt.want {
			t.Errorf("placement %q constraints %q: got zone %q, %v; want %s", tt.placement, tt.cons, res.Instance.Zone, err, tt.want)
		}
	}
}

// closingDoer closes the body the caller built (as the SDK does once a
// response is in) before it reads the body it was given, as a transport
// that is slow to finish writing would.
type closingDoer struct {
	callerBody io.Closer
	got        []byte
	err        error
}

func (d *closingDoer) Do(r *http.Request) (*http.Response, error) {
	d.callerBody.Close()
	d.got, d.err = io.ReadAll(r.Body)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// TestOwnBodies: the transport reads a copy of the request body that the
// SDK closing its own cannot cut short.
func TestOwnBodies(t *testing.T) {
	body := strings.Repeat("Action=RunInstances&", 500)
	pr, pw := io.Pipe()
	go func() { io.WriteString(pw, body); pw.Close() }()
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/ec2/", pr)
	if err != nil {
		t.Fatal(err)
	}
	d := &closingDoer{callerBody: pr}
	if _, err := (ownBodies{d}).Do(req); err != nil {
		t.Fatal(err)
	}
	if d.err != nil || string(d.got) != body {
		t.Errorf("transport read %d bytes, %v; want the whole body of %d", len(d.got), d.err, len(body))
	}
}

func TestIsLoopbackEndpoint(t *testing.T) {
	for endpoint, want := range map[string]bool{
		"http://127.0.0.1:7070":               true,
		"http://127.9.9.9/ec2/":               true,
		"http://[::1]:7070":                   true,
		"http://LOCALHOST:7070":               true,
		"":                                    false,
		"https://ec2.us-east-1.amazonaws.com": false,
		"http://10.0.0.1:7070":                false,
		"http://localhost.example.com":        false,
		"http://127.0.0.1.example.com":        false,
	} {
		if got := isLoopbackEndpoint(endpoint); got != want {
			t.Errorf("isLoopbackEndpoint(%q) = %v, want %v", endpoint, got, want)
		}
	}
}

// With a loopback endpoint and no credentials in the chain, the provider
// uses Config.LoopbackCredentials (the sim's default key pair); the chain's
// own credentials, when it has some, come first; the instance metadata
// service is never asked.
func TestLoopbackCredentials(t *testing.T) {
	s := newSimEC2(t, nil)
	var imdsCalls atomic.Int32
	imdsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		imdsCalls.Add(1)
		http.NotFound(w, r)
	}))
	defer imdsSrv.Close()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imdsSrv.URL)
	simKeys := credentials.NewStaticCredentialsProvider(sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey, "")
	zones := func(endpoint string, fallback aws.CredentialsProvider) error {
		t.Helper()
		return zonesWith(t, Config{Region: "us-east-1", Endpoint: endpoint, LoopbackCredentials: fallback})
	}
	if err := zones(s.endpoint, simKeys); err != nil {
		t.Errorf("loopback endpoint, empty chain: %v", err)
	}
	if err := zones(strings.Replace(s.endpoint, "127.0.0.1", "localhost", 1), simKeys); err != nil {
		t.Errorf("localhost endpoint, empty chain: %v", err)
	}
	if err := zones(s.endpoint, nil); err == nil {
		t.Error("loopback endpoint, empty chain, no fallback: got no error")
	}
	if n := imdsCalls.Load(); n != 0 {
		t.Errorf("the metadata service was asked %d times for a loopback endpoint", n)
	}
	// The chain's credentials come first, even when they are wrong.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIACHAINKEY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "chain-secret")
	err := zones(s.endpoint, simKeys)
	wantKind(t, "chain credentials first", err, muster.ErrZoneIndependent, "")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	// Without an endpoint (AWS itself) the chain asks the metadata service
	// (here a local one that has no role), and the fallback is not used:
	// no request is sent without credentials.
	if err := zones("", simKeys); err == nil {
		t.Error("AWS endpoint, empty chain: got no error")
	}
	if imdsCalls.Load() == 0 {
		t.Error("the metadata service was not asked for the AWS endpoint: the check above proves nothing")
	}
}

// AWS_CA_BUNDLE (or ca_bundle in ~/.aws/config) makes the SDK build its own
// HTTP client: an endpoint served with a certificate of that bundle works.
func TestCABundle(t *testing.T) {
	srv := httptest.NewTLSServer(simHandler(newSimEC2(t, nil).cloud))
	defer srv.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewStaticCredentialsProvider(sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey, "")
	zones := func() error {
		t.Helper()
		return zonesWith(t, Config{Region: "us-east-1", Endpoint: srv.URL, Credentials: creds})
	}
	if err := zones(); err == nil {
		t.Error("a TLS endpoint with an unknown certificate: got no error")
	}
	t.Setenv("AWS_CA_BUNDLE", bundle)
	if err := zones(); err != nil {
		t.Errorf("with AWS_CA_BUNDLE: %v", err)
	}
}

// The provider forgets the instances it started once they are gone from
// the listings long after their start, and not before.
func TestOwnForgotten(t *testing.T) {
	s := newSimEC2(t, nil)
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	now := time.Now()
	p.now = func() time.Time { return now }
	var ids []string
	for i := range 3 {
		res, err := p.StartInstance(ctx, params(p, strconv.Itoa(i), "us-east-1a"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Instance.ID)
	}
	own := func() []string {
		p.mu.Lock()
		defer p.mu.Unlock()
		var out []string
		for id := range p.own {
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}
	s.cloud.RemoveInstances(ids[0]) // gone behind muster's back
	s.setFaults(t, func(f *sim.Faults) { f.ListingLag = 24 * time.Hour })
	if _, err := p.Instances(ctx); err != nil { // lags: lists none of them
		t.Fatal(err)
	}
	if got := own(); len(got) != 3 {
		t.Errorf("young instances missing from a listing: own %v, want all 3", got)
	}
	s.setFaults(t, func(f *sim.Faults) { f.ListingLag = 0 })
	now = now.Add(ownForget + time.Minute)
	if _, err := p.Instances(ctx); err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(ids[1:]))
	if got := own(); !slices.Equal(got, want) {
		t.Errorf("after an hour: own %v, want the live ones %v", got, want)
	}
}

// zonesWith opens a provider with cfg and returns the error of its Zones.
func zonesWith(t *testing.T, cfg Config) error {
	t.Helper()
	ctx := testCtx(t)
	p, err := Open(ctx, cfg, "c", "m")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Zones(ctx)
	return err
}

// A sim restarted from its state file still filters by tag, though one of
// its instances has no tags at all (saved without a tag map): the
// provider's tag-filtered listing works across the restart (issue 16).
func TestInstancesAfterSimRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "sim.json")
	s := newSimEC2(t, func(c *sim.Config) { c.StateFile = state })
	controller, model := muster.NewUUID(), muster.NewUUID()
	if _, err := s.cloud.CreateInstance(sim.NewInstance{Zone: testZones[0]}); err != nil {
		t.Fatal(err)
	}
	own, err := s.cloud.CreateInstance(sim.NewInstance{Zone: testZones[1], Controller: controller, Model: model, MachineID: "3", LaunchToken: "tok-3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cloud.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newSimEC2(t, func(c *sim.Config) { c.StateFile = state })
	insts, err := s2.provider(t, controller, model).Instances(context.Background())
	if err != nil {
		t.Fatalf("Instances after the restart: %v", err)
	}
	if len(insts) != 1 || insts[0].ID != own.ID || insts[0].MachineID != "3" {
		t.Errorf("Instances after the restart: got %+v, want only %s of machine 3", insts, own.ID)
	}
}
