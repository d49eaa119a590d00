// Package storetest is the conformance suite of muster.Store: the same
// tests run against every implementation (SQLite, PostgreSQL).
package storetest

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// OpenFunc opens the store called name, creating it empty the first time it
// is opened. Opening the same name again after the store was closed must
// give back its state: that is how the suite tests persistence. Distinct
// names are distinct, independent stores. OpenFunc reports failures with
// tb.Fatal; the suite closes what it opens.
type OpenFunc func(tb testing.TB, name string) muster.Store

// Run runs the whole suite against the stores that open makes.
func Run(t *testing.T, open OpenFunc) {
	h := &harness{open: open}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"Models", testModels},
		{"ModelErrors", testModelErrors},
		{"ModelsPersist", testModelsPersist},
		{"Machines", testMachines},
		{"MachineErrors", testMachineErrors},
		{"IDsNeverReused", testIDsNeverReused},
		{"LifeForwardOnly", testLifeForwardOnly},
		{"UpdateMachines", testUpdateMachines}, {"UpdateMachinesMany", testUpdateMachinesMany},
		{"UpdateAllOrNothing", testUpdateAllOrNothing},
		{"RecordInstances", testRecordInstances},
		{"ReplaceInstance", testReplaceInstance},
		{"ReplaceReleases", testReplaceReleases},
		{"UpdateTemplate", testUpdateTemplate},
		{"RemoveMachines", testRemoveMachines},
		{"ProvisioningInfo", testProvisioningInfo},
		{"DistributionGroups", testDistributionGroups},
		{"MachinesPage", testMachinesPage}, {"MachinesReadTogether", testMachinesReadTogether},
		{"RecordHeartbeats", testRecordHeartbeats},
		{"Events", testEvents},
		{"EventsFollow", testEventsFollow},
		{"EventsSeqs", testEventsSeqs},
		{"ControllerConfig", testControllerConfig},
		{"WatchInitial", testWatchInitial},
		{"WatchCoalesced", testWatchCoalesced},
		{"WatchIsolation", testWatchIsolation},
		{"WatchKinds", testWatchKinds},
		{"WatchResume", testWatchResume},
		{"WatchEnd", testWatchEnd},
		{"WatchErrors", testWatchErrors},
		{"Trim", testTrim},
		{"UpdateWithEvents", testUpdateWithEvents},
		{"ConcurrentWriters", testConcurrentWriters},
		{"Leases", testLeases},
		{"LeaseExpiry", testLeaseExpiry},
		{"LeaseContention", testLeaseContention},
		{"LeaseErrors", testLeaseErrors},
		{"ControllerRegistry", testControllerRegistry},
		{"Enrolment", testEnrolment},
		{"EnrolmentBatch", testEnrolmentBatch},
		{"EnrolmentThen", testEnrolmentThen},
		{"CapacityBlocks", testCapacityBlocks},
		{"ReleaseInstances", testReleaseInstances},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each test has its own stores; running them side by side
			// hides the latency of a database server.
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// waitFor bounds every wait on a watcher. It is a guard against hanging,
// not a timing assertion: a correct store answers far sooner.
const waitFor = 20 * time.Second

type harness struct {
	open OpenFunc
}

// closeOnce lets a test close a store itself while the cleanup closes it
// too.
type closeOnce struct {
	muster.Store
	once sync.Once
	err  error
}

func (c *closeOnce) Close() error {
	c.once.Do(func() { c.err = c.Store.Close() })
	return c.err
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// name returns a store name for the test, the same for every call in it.
func storeName(tb testing.TB) string {
	return strings.ToLower(unsafeName.ReplaceAllString(tb.Name(), "_"))
}

// store opens the test's store (again), closing it at the end of the test.
func (h *harness) store(tb testing.TB) muster.Store {
	tb.Helper()
	s := &closeOnce{Store: h.open(tb, storeName(tb))}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	return s
}

func ctxFor(tb testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	return ctx
}

func newModel(tb testing.TB, s muster.Store, name string) muster.Model {
	tb.Helper()
	m, err := s.CreateModel(context.Background(), muster.Model{Name: name, Provider: "sim"})
	if err != nil {
		tb.Fatalf("create model %s: %v", name, err)
	}
	return m
}

func addMachines(tb testing.TB, s muster.Store, model string, n int) []string {
	tb.Helper()
	ms, err := s.AddMachines(context.Background(), model, make([]muster.MachineTemplate, n))
	if err != nil {
		tb.Fatalf("add %d machines: %v", n, err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

func update(tb testing.TB, s muster.Store, model string, us ...muster.MachineUpdate) {
	tb.Helper()
	if err := s.UpdateMachines(context.Background(), model, us); err != nil {
		tb.Fatalf("update machines: %v", err)
	}
}

func machine(tb testing.TB, s muster.Store, model, id string) muster.Machine {
	tb.Helper()
	m, err := s.Machine(context.Background(), model, id)
	if err != nil {
		tb.Fatalf("machine %s: %v", id, err)
	}
	return m
}

func kill(tb testing.TB, s muster.Store, model string, ids ...string) {
	tb.Helper()
	var us []muster.MachineUpdate
	for _, id := range ids {
		us = append(us, muster.MachineUpdate{ID: id, Life: muster.Ptr(muster.LifeDead)})
	}
	update(tb, s, model, us...)
}

func wantCode(tb testing.TB, what string, err error, code string) {
	tb.Helper()
	if got := muster.ErrorCode(err); got != code {
		tb.Fatalf("%s: got error %v (code %q), want code %q", what, err, got, code)
	}
	if code != "" && strings.TrimSpace(muster.ErrorMessage(err)) == "" {
		tb.Fatalf("%s: error %q has no message", what, err)
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func machineIDs(ms []muster.Machine) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
