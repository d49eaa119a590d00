package storetest

import (
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// testCapacityBlocks: the capacity memory (Z7) is keyed by cloud, zone and
// shape, keeps the later end, hides ended blocks and survives a reopen.
func testCapacityBlocks(t *testing.T, h *harness) {
	s := h.store(t)
	ctx := ctxFor(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, b := range []muster.CapacityBlock{
		{Cloud: "sim:http://x", Zone: "a", Shape: "cores=2", Until: t0.Add(3 * time.Minute)},
		{Cloud: "sim:http://x", Zone: "a", Shape: "cores=2", Until: t0.Add(time.Minute)},  // earlier: ignored
		{Cloud: "sim:http://x", Zone: "b", Shape: "cores=2", Until: t0.Add(-time.Minute)}, // ended
		{Cloud: "sim:http://x", Zone: "c", Shape: "cores=4", Until: t0.Add(time.Hour)},
		{Cloud: "ec2:us-east-1", Zone: "a", Shape: "cores=2", Until: t0.Add(time.Hour)}, // another cloud
	} {
		if err := s.BlockCapacity(ctx, b); err != nil {
			t.Fatalf("block %+v: %v", b, err)
		}
	}
	wantCode(t, "block without zone", s.BlockCapacity(ctx, muster.CapacityBlock{Cloud: "x", Shape: "s", Until: t0}), muster.EInvalid)
	check := func(s muster.Store) {
		t.Helper()
		got, err := s.CapacityBlocks(ctx, "sim:http://x", t0)
		if err != nil {
			t.Fatal(err)
		}
		want := []muster.CapacityBlock{
			{Cloud: "sim:http://x", Zone: "a", Shape: "cores=2", Until: t0.Add(3 * time.Minute)},
			{Cloud: "sim:http://x", Zone: "c", Shape: "cores=4", Until: t0.Add(time.Hour)},
		}
		if len(got) != len(want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
		for i := range want {
			if got[i].Cloud != want[i].Cloud || got[i].Zone != want[i].Zone || got[i].Shape != want[i].Shape || !got[i].Until.Equal(want[i].Until) {
				t.Errorf("block %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	check(s)
	// A later block extends; after its end it is gone.
	if err := s.BlockCapacity(ctx, muster.CapacityBlock{Cloud: "ec2:us-east-1", Zone: "a", Shape: "cores=2", Until: t0.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.CapacityBlocks(ctx, "ec2:us-east-1", t0.Add(90*time.Minute)); err != nil || len(got) != 1 {
		t.Errorf("extended block: got %+v, %v; want one", got, err)
	}
	if got, err := s.CapacityBlocks(ctx, "ec2:us-east-1", t0.Add(2*time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("ended block: got %+v, %v; want none", got, err)
	}
	s.Close()
	check(h.store(t))
}

// testReleaseInstances: released instances (H8) are remembered per model,
// twice is fine, an unknown model is ENotFound.
func testReleaseInstances(t *testing.T, h *harness) {
	s := h.store(t)
	ctx := ctxFor(t)
	m := newModel(t, s, "rel")
	other := newModel(t, s, "other")
	if err := s.ReleaseInstances(ctx, m.UUID, []string{"i-1", "i-2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseInstances(ctx, m.UUID, []string{"i-2"}); err != nil {
		t.Fatalf("release twice: %v", err)
	}
	wantCode(t, "release in unknown model", s.ReleaseInstances(ctx, "nope", []string{"i-3"}), muster.ENotFound)
	wantCode(t, "release empty id", s.ReleaseInstances(ctx, m.UUID, []string{""}), muster.EInvalid)
	got, err := s.ReleasedInstances(ctx, m.UUID)
	if err != nil || len(got) != 2 || !got["i-1"] || !got["i-2"] {
		t.Errorf("released: got %v, %v; want i-1 and i-2", got, err)
	}
	if got, err := s.ReleasedInstances(ctx, other.UUID); err != nil || len(got) != 0 {
		t.Errorf("other model: got %v, %v; want none", got, err)
	}
}
