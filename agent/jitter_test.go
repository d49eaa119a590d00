package agent

import (
	"testing"
	"time"
)

// TestHeartbeatJitter: the first heartbeat of a session comes anywhere in
// (period/2, period], later ones in [0.9, 1] periods, never later than the period
// the controller counts missed beats by, and agents do not beat in step.
func TestHeartbeatJitter(t *testing.T) {
	const period = 10 * time.Second
	for _, tc := range []struct {
		name     string
		draw     func(time.Duration) time.Duration
		min, max time.Duration
	}{
		{"first", firstHeartbeat, period/2 + 1, period},
		{"next", nextHeartbeat, period * 9 / 10, period},
	} {
		seen := map[time.Duration]bool{}
		var lo, hi time.Duration = period, 0
		for range 1000 {
			d := tc.draw(period)
			if d < tc.min || d > tc.max {
				t.Fatalf("%s heartbeat after %s, want within [%s, %s]", tc.name, d, tc.min, tc.max)
			}
			seen[d] = true
			lo, hi = min(lo, d), max(hi, d)
		}
		// 1,000 draws cover most of the range: they spread agents out.
		if len(seen) < 900 || hi-lo < (tc.max-tc.min)*8/10 {
			t.Errorf("%s heartbeat: %d distinct waits between %s and %s, want them spread over [%s, %s]", tc.name, len(seen), lo, hi, tc.min, tc.max)
		}
	}
	if d := nextHeartbeat(time.Nanosecond); d != time.Nanosecond {
		t.Errorf("next heartbeat of a 1 ns period: %s", d)
	}
}
