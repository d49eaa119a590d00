package sim

import (
	"strings"
	"testing"
	"time"
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
