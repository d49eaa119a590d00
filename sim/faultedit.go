package sim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// FaultEdit is a change to a cloud's faults, as `muster sim faults` takes
// it (its errors name that command's flags): nil fields are left as they
// are.
type FaultEdit struct {
	Clear          bool     // remove every fault first
	StartErrorRate *float64 // probability 0..1 that a start fails (in Zone only, if set)
	Zone           string   // for StartErrorRate and FailNext
	FailNext       *int     // the next N starts in Zone fail with a capacity error
	Latency        *time.Duration
	RateLimit      *Bucket // a request bucket for every call kind
	ListingLag     *time.Duration
	ReplyDelay     *time.Duration // of starts
	LoseReplies    *int           // of starts
	QuotaVCPUs     *int           // the region's vCPU quota, 0 for none
	// AgentBootFailureRate is the probability 0..1 that a new instance's
	// simulated agent never boots.
	AgentBootFailureRate *float64
}

// Check refuses values that make no sense, before anything is changed.
func (e FaultEdit) Check() error {
	if r := e.StartErrorRate; r != nil && (*r < 0 || *r > 1) {
		return muster.Errorf(muster.EInvalid, "bad --start-error-rate %g: want 0..1", *r)
	}
	if r := e.AgentBootFailureRate; r != nil && !(*r >= 0 && *r <= 1) {
		return muster.Errorf(muster.EInvalid, "bad --agent-boot-failure-rate %g: want 0..1", *r)
	}
	if e.FailNext != nil {
		if *e.FailNext < 0 {
			return muster.Errorf(muster.EInvalid, "bad --fail-next %d: want 0 or more", *e.FailNext)
		}
		if e.Zone == "" {
			return muster.Errorf(muster.EInvalid, "--fail-next needs --zone")
		}
	}
	if e.Zone != "" && e.FailNext == nil && e.StartErrorRate == nil {
		return muster.Errorf(muster.EInvalid, "--zone goes with --fail-next or --start-error-rate")
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"latency", e.Latency}, {"listing-lag", e.ListingLag}, {"reply-delay", e.ReplyDelay}} {
		if d.v != nil && *d.v < 0 {
			return muster.Errorf(muster.EInvalid, "bad --%s %s: negative", d.name, *d.v)
		}
	}
	if e.LoseReplies != nil && *e.LoseReplies < 0 {
		return muster.Errorf(muster.EInvalid, "bad --lose-replies %d: want 0 or more", *e.LoseReplies)
	}
	if e.QuotaVCPUs != nil && *e.QuotaVCPUs < 0 {
		return muster.Errorf(muster.EInvalid, "bad --quota-vcpus %d: want 0 (none) or more", *e.QuotaVCPUs)
	}
	return nil
}

// ChangesFaults reports whether the edit changes Faults (FailNext is set
// through its own call).
func (e FaultEdit) ChangesFaults() bool {
	return e.Clear || e.StartErrorRate != nil || e.Latency != nil || e.RateLimit != nil ||
		e.ListingLag != nil || e.ReplyDelay != nil || e.LoseReplies != nil || e.QuotaVCPUs != nil ||
		e.AgentBootFailureRate != nil
}

// Apply returns f with the edit made (FailNext aside).
func (e FaultEdit) Apply(f Faults) Faults {
	if e.Clear {
		f = Faults{}
	}
	if r := e.StartErrorRate; r != nil {
		if e.Zone != "" {
			f.ZoneErrorRate = setMap(f.ZoneErrorRate, e.Zone, *r)
		} else {
			f.ErrorRate = setMap(f.ErrorRate, CallStart, *r)
		}
	}
	for _, k := range CallKinds {
		if e.Latency != nil {
			f.Latency = setMap(f.Latency, k, Latency{Fixed: *e.Latency})
		}
		if e.RateLimit != nil {
			f.RateLimits = setMap(f.RateLimits, k, *e.RateLimit)
		}
	}
	if e.ListingLag != nil {
		f.ListingLag = *e.ListingLag
	}
	if e.ReplyDelay != nil {
		f.ReplyDelay = setMap(f.ReplyDelay, CallStart, Latency{Fixed: *e.ReplyDelay})
	}
	if e.LoseReplies != nil {
		f.LoseReplies = setMap(f.LoseReplies, CallStart, *e.LoseReplies)
	}
	if e.QuotaVCPUs != nil {
		f.QuotaVCPUs = *e.QuotaVCPUs
	}
	if e.AgentBootFailureRate != nil {
		f.AgentBootFailureRate = *e.AgentBootFailureRate
	}
	return f
}

func setMap[V any](m map[string]V, k string, v V) map[string]V {
	if m == nil {
		m = map[string]V{}
	}
	m[k] = v
	return m
}

// Summary describes f a kind a line: each line's name and its settings
// ("start=0.2 list=0.1", or "none").
func (f Faults) Summary() [][2]string {
	list := func(m map[string]string) string {
		if len(m) == 0 {
			return "none"
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + m[k]
		}
		return strings.Join(parts, " ")
	}
	latency := func(m map[string]Latency) string {
		out := map[string]string{}
		for k, v := range m {
			if v.Fixed != 0 || v.Jitter != 0 {
				s := v.Fixed.String()
				if v.Jitter != 0 {
					s += "+" + v.Jitter.String()
				}
				out[k] = s
			}
		}
		return list(out)
	}
	rates := func(m map[string]float64) string {
		out := map[string]string{}
		for k, v := range m {
			if v != 0 {
				out[k] = strconv.FormatFloat(v, 'g', -1, 64)
			}
		}
		return list(out)
	}
	counts := func(m map[string]int) string {
		out := map[string]string{}
		for k, v := range m {
			if v != 0 {
				out[k] = strconv.Itoa(v)
			}
		}
		return list(out)
	}
	bucket := func(b Bucket) string { return fmt.Sprintf("%d/%g", b.Burst, b.PerSecond) }
	rl := map[string]string{}
	for k, v := range f.RateLimits {
		if v.Burst != 0 {
			rl[k] = bucket(v)
		}
	}
	ir, quota := "none", "none"
	if f.InstanceRate.Burst != 0 {
		ir = bucket(f.InstanceRate)
	}
	if f.QuotaVCPUs != 0 {
		quota = strconv.Itoa(f.QuotaVCPUs)
	}
	return [][2]string{
		{"error-rate", rates(f.ErrorRate)},
		{"zone-error-rate", rates(f.ZoneErrorRate)},
		{"fail-next", counts(f.FailNext)},
		{"latency", latency(f.Latency)},
		{"rate-limit", list(rl)},
		{"instance-rate", ir},
		{"listing-lag", f.ListingLag.String()},
		{"reply-delay", latency(f.ReplyDelay)},
		{"lose-replies", counts(f.LoseReplies)},
		{"quota-vcpus", quota},
		{"agent-boot-fail", strconv.FormatFloat(f.AgentBootFailureRate, 'g', -1, 64)},
	}
}
