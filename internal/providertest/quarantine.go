package providertest

import (
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// testQuarantine checks R6's provider side: a quarantined instance is
// stopped, not gone, and listed with its mark (the first mark stays); a
// restore brings it back running without the mark; others' instances and
// unknown ids are ENotFound. Providers that are not Quarantiners skip.
func testQuarantine(t *testing.T, f Fixture) {
	qr, ok := f.Provider.(muster.Quarantiner)
	if !ok {
		t.Skip("provider is not a muster.Quarantiner")
	}
	p := f.Provider
	id := start(t, p, params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")).Instance.ID
	eventually(t, f, "instance listed running", func() bool { return listed(t, p)[id].State == "running" })

	since := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := qr.Quarantine(ctxFor(t), id, since); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}
	eventually(t, f, "quarantined instance listed stopped", func() bool { return listed(t, p)[id].State == "stopped" })
	if err := qr.Quarantine(ctxFor(t), id, since.Add(time.Hour)); err != nil {
		t.Fatalf("Quarantine again: %v", err)
	}
	got, ok := muster.QuarantinedSince(listed(t, p)[id])
	if !ok || !got.Equal(since) {
		t.Errorf("quarantined since %v (%v), want %v (the first mark)", got, ok, since)
	}
	if err := qr.Quarantine(ctxFor(t), "no-such-instance", since); !muster.IsCode(err, muster.ENotFound) {
		t.Errorf("Quarantine of an unknown id: got %v, want not-found", err)
	}
	if f.Other != nil {
		other, ok := f.Other(t, f.ControllerUUID, "other-"+f.ModelUUID).(muster.Quarantiner)
		if ok {
			if err := other.Restore(ctxFor(t), id); !muster.IsCode(err, muster.ENotFound) {
				t.Errorf("Restore by another model: got %v, want not-found", err)
			}
		}
	}
	// A stop takes its time on some clouds: a restore meanwhile may be
	// refused as unavailable, and is tried again.
	eventually(t, f, "restore accepted", func() bool {
		err := qr.Restore(ctxFor(t), id)
		if err != nil && muster.ProviderErrorKindOf(err) != muster.ErrUnavailable {
			t.Fatalf("Restore: %v", err)
		}
		return err == nil
	})
	eventually(t, f, "restored instance listed running without its mark", func() bool {
		in := listed(t, p)[id]
		_, marked := muster.QuarantinedSince(in)
		return in.State == "running" && !marked
	})
}
