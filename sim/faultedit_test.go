package sim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
)

func TestFaultEditCheck(t *testing.T) {
	rate, bad, n, neg := 0.5, 1.5, 3, -1
	d, negD := time.Second, -time.Second
	for _, tc := range []struct {
		name string
		e    FaultEdit
		want string // "" = accepted
	}{
		{"rate", FaultEdit{StartErrorRate: &rate}, ""},
		{"rate in a zone", FaultEdit{StartErrorRate: &rate, Zone: "a"}, ""},
		{"rate above 1", FaultEdit{StartErrorRate: &bad}, "want 0..1"},
		{"fail-next without zone", FaultEdit{FailNext: &n}, "needs --zone"},
		{"negative fail-next", FaultEdit{FailNext: &neg, Zone: "a"}, "want 0 or more"},
		{"zone alone", FaultEdit{Zone: "a"}, "goes with"},
		{"negative latency", FaultEdit{Latency: &negD}, "bad --latency"},
		{"negative listing lag", FaultEdit{ListingLag: &negD}, "bad --listing-lag"},
		{"negative lost replies", FaultEdit{LoseReplies: &neg}, "bad --lose-replies"},
		{"durations", FaultEdit{Latency: &d, ListingLag: &d, ReplyDelay: &d}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.e.Check()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestFaultEditApply(t *testing.T) {
	rate, lost := 0.25, 4
	lat, lag := 5*time.Millisecond, 3*time.Second
	f := FaultEdit{StartErrorRate: &rate, Latency: &lat, RateLimit: &Bucket{Burst: 10, PerSecond: 50}, ListingLag: &lag, LoseReplies: &lost}.Apply(Faults{})
	got := map[string]string{}
	for _, l := range f.Summary() {
		got[l[0]] = l[1]
	}
	for k, want := range map[string]string{
		"error-rate": "start=0.25", "zone-error-rate": "none", "listing-lag": "3s", "lose-replies": "start=4", "instance-rate": "none",
	} {
		if got[k] != want {
			t.Errorf("%s: got %q, want %q", k, got[k], want)
		}
	}
	for _, k := range CallKinds {
		if !strings.Contains(got["latency"], k+"=5ms") || !strings.Contains(got["rate-limit"], k+"=10/50") {
			t.Errorf("call kind %s: latency %q, rate-limit %q", k, got["latency"], got["rate-limit"])
		}
	}
	// A zone's rate goes to that zone only; Clear starts from nothing.
	f = FaultEdit{Clear: true, StartErrorRate: &rate, Zone: "b"}.Apply(f)
	if f.ZoneErrorRate["b"] != 0.25 || len(f.ErrorRate) != 0 || len(f.Latency) != 0 || f.ListingLag != 0 {
		t.Fatalf("clear then zone rate: got %+v", f)
	}
	if (FaultEdit{Zone: "b", FailNext: &lost}).ChangesFaults() || !(FaultEdit{Clear: true}).ChangesFaults() {
		t.Fatal("ChangesFaults: fail-next alone changes no Faults, clear does")
	}
}

// TestQuotaVCPUs: the region's vCPU quota refuses a start beyond it in
// every zone with a quota error, and frees up as instances go.
func TestQuotaVCPUs(t *testing.T) {
	c, err := Open(Config{Clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.Provider("ctrl", "model")
	q := 2
	c.SetFaults(FaultEdit{QuotaVCPUs: &q}.Apply(Faults{}))
	ctx := context.Background()
	sp := func(id, zone string) muster.StartParams {
		return muster.StartParams{MachineID: id, Zone: zone, Base: "ubuntu@24.04", LaunchToken: "tok-" + id}
	}
	first, err := p.StartInstance(ctx, sp("0", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.StartInstance(ctx, sp("1", "b")); err != nil {
		t.Fatal(err)
	}
	for _, zone := range []string{"a", "b", "c"} {
		_, err := p.StartInstance(ctx, sp("2"+zone, zone))
		var pe *muster.ProviderError
		if !errors.As(err, &pe) || pe.Kind != muster.ErrQuota || pe.Zone != "" || !strings.Contains(pe.Message, "quota of 2") {
			t.Fatalf("start in zone %s over the quota: got %v, want a quota error naming no zone", zone, err)
		}
	}
	if err := p.StopInstances(ctx, first.Instance.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.StartInstance(ctx, sp("3", "c")); err != nil {
		t.Fatalf("start after an instance went: %v", err)
	}
}
