package ec2

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/musterhq/muster"
)

func TestClientToken(t *testing.T) {
	tok := strings.Repeat("ab", 32)
	if got := clientToken(tok); got != tok {
		t.Errorf("clientToken(64 hex) = %q, want the token", got)
	}
	if got := clientToken(""); got != "" {
		t.Errorf("clientToken(\"\") = %q", got)
	}
	long := strings.Repeat("x", 65)
	if got := clientToken(long); len(got) != 64 || !strings.HasPrefix(got, "t-") || got != clientToken(long) {
		t.Errorf("clientToken(65 chars) = %q, want a stable 64-char hash", got)
	}
	if got := clientToken("tök"); got == "tök" || len(got) != 64 {
		t.Errorf("clientToken(non-ASCII) = %q, want a hash", got)
	}
	b := batchToken([]string{"a", "b"})
	if len(b) != 64 || !strings.HasPrefix(b, "b-") || b != batchToken([]string{"a", "b"}) || b == batchToken([]string{"b", "a"}) || b == batchToken([]string{"a"}) {
		t.Errorf("batchToken = %q: want 64 chars, stable, order-sensitive", b)
	}
	// The contract: "b-" + first 62 hex of sha256("a,b").
	if b[2:] != sha256hex("a,b")[:62] {
		t.Errorf("batchToken(a, b) = %q, want b- and the first 62 hex digits of sha256(\"a,b\")", b)
	}
}

func TestPlanVolumes(t *testing.T) {
	sp := muster.StartParams{
		MachineID: "4",
		Volumes:   []muster.Volume{{Name: "data", Size: 10 << 10}, {Name: "logs", Size: 1500, Pool: "gp2"}, {Name: "tiny"}},
		Attachments: []muster.VolumeAttachment{
			{Volume: "data", MachineID: "4"}, {Volume: "logs", MachineID: "4"},
		},
	}
	vols, err := planVolumes(sp)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		dev string
		gib int32
		typ string
	}{{"/dev/sdf", 10, "gp3"}, {"/dev/sdg", 2, "gp2"}, {"/dev/sdh", 1, "gp3"}}
	for i, w := range want {
		if vols[i].device != w.dev || vols[i].gib != w.gib || string(vols[i].typ) != w.typ {
			t.Errorf("volume %d: got %s %d GiB %s, want %s %d GiB %s", i, vols[i].device, vols[i].gib, vols[i].typ, w.dev, w.gib, w.typ)
		}
	}
	bad := []struct {
		name string
		edit func(sp *muster.StartParams)
		want string
	}{
		{"unknown pool", func(sp *muster.StartParams) { sp.Volumes[0].Pool = "ceph" }, `unknown storage pool "ceph"`},
		{"duplicate", func(sp *muster.StartParams) { sp.Volumes[1].Name = "data" }, `volume "data" given more than once`},
		{"bad name", func(sp *muster.StartParams) { sp.Volumes[0].Name = "a b" }, "bad volume name"},
		{"too large", func(sp *muster.StartParams) { sp.Volumes[0].Size = 1 << 40 }, "larger than EBS allows"},
		{"unknown attachment", func(sp *muster.StartParams) { sp.Attachments[0].Volume = "nope" }, `unknown volume "nope"`},
		{"other machine", func(sp *muster.StartParams) { sp.Attachments[0].MachineID = "5" }, "is for machine 5"},
		{"too many", func(sp *muster.StartParams) {
			for i := 0; i < 12; i++ {
				sp.Volumes = append(sp.Volumes, muster.Volume{Name: "v" + string(rune('a'+i))})
			}
		}, "attaches at most 11"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c := sp
			c.Volumes = slices.Clone(sp.Volumes)
			c.Attachments = slices.Clone(sp.Attachments)
			tt.edit(&c)
			_, err := planVolumes(c)
			if muster.ProviderErrorKindOf(err) != muster.ErrZoneIndependent || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a zone-independent error containing %q", err, tt.want)
			}
		})
	}
}

// TestPlanRefusesBeforeCalling checks the params a start refuses without
// asking EC2.
func TestPlanRefusesBeforeCalling(t *testing.T) {
	p := newOffline(t)
	ctx := context.Background()
	tests := []struct {
		name string
		sp   muster.StartParams
		want string
	}{
		{"other model", muster.StartParams{MachineID: "0", ModelUUID: "other"}, "not this provider's"},
		{"other controller", muster.StartParams{MachineID: "0", ControllerUUID: "other"}, "not this provider's"},
		{"arch", muster.StartParams{MachineID: "0", Arch: "s390x"}, "amd64 and arm64 instances only"},
		{"aws tag", muster.StartParams{MachineID: "0", Tags: map[string]string{"aws:cloudformation:stack": "x"}}, "reserved by AWS"},
		{"no agent binary", muster.StartParams{MachineID: "3", UserData: agentParams(t, "3", "https://h/a", fakeSHA).UserData}, "no agent binary download URL for linux/amd64"},
		{"root disk", muster.StartParams{MachineID: "0", Constraints: muster.Constraints{RootDisk: 1 << 40}}, "larger than EBS allows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.StartInstance(ctx, tt.sp)
			if muster.ProviderErrorKindOf(err) != muster.ErrZoneIndependent || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a zone-independent error containing %q", err, tt.want)
			}
		})
	}
	outs := p.StartInstances(ctx, []muster.StartParams{tests[0].sp, tests[2].sp})
	for i, o := range outs {
		if muster.ProviderErrorKindOf(o.Err) != muster.ErrZoneIndependent {
			t.Errorf("batch outcome %d: got %v, want a zone-independent error", i, o.Err)
		}
	}
	if c := p.callCounts(); len(c) != 0 {
		t.Errorf("made calls: %v", c)
	}
}

func TestDeriveZonesOffline(t *testing.T) {
	p := newOffline(t)
	p.zones = []string{"us-east-1a", "us-east-1b", "us-east-1c"}
	ctx := context.Background()
	s2z := []map[string][]string{
		{"subnet-1": {"us-east-1a"}, "subnet-2": {"us-east-1b"}},
		{"subnet-3": {"us-east-1b", "us-east-1c"}},
	}
	tests := []struct {
		name      string
		placement string
		s2z       []map[string][]string
		want      []string
		wantErr   string
	}{
		{"nothing", "", nil, nil, ""},
		{"placement", "zone=us-east-1b", nil, []string{"us-east-1b"}, ""},
		{"spaces", "", s2z, []string{"us-east-1b"}, ""},
		{"first space", "", s2z[:1], []string{"us-east-1a", "us-east-1b"}, ""},
		{"placement and spaces", "zone=us-east-1b", s2z, []string{"us-east-1b"}, ""},
		{"placement outside spaces", "zone=us-east-1a", s2z, nil, "has no subnet of requested space 2"},
		{"bad placement", "rack=4", nil, nil, "bad placement"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.DeriveZones(ctx, muster.StartParams{Placement: tt.placement, SubnetsToZones: tt.s2z})
			if tt.wantErr != "" {
				if muster.ProviderErrorKindOf(err) != muster.ErrZoneIndependent || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("got %v, %v; want a zone-independent error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if c := p.callCounts(); len(c) != 0 {
		t.Errorf("made calls: %v", c)
	}
}

func TestStopNothing(t *testing.T) {
	p := newOffline(t)
	if err := p.StopInstances(context.Background()); err != nil {
		t.Errorf("StopInstances(): %v", err)
	}
	if err := p.StopInstances(context.Background(), "", "not-an-instance", "i-a b"); err != nil {
		t.Errorf("StopInstances(malformed ids): %v", err)
	}
	if c := p.callCounts(); len(c) != 0 {
		t.Errorf("made calls: %v", c)
	}
}
