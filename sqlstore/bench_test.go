package sqlstore_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/musterhq/muster"
)

// backends are the stores the benchmarks run on: SQLite, and PostgreSQL
// when MUSTER_TEST_POSTGRES is set.
func backends() []string {
	if os.Getenv("MUSTER_TEST_POSTGRES") != "" {
		return []string{"sqlite", "postgres"}
	}
	return []string{"sqlite"}
}

func benchModel(b *testing.B, backend string) (muster.Store, string) {
	b.Helper()
	var s muster.Store
	if backend == "postgres" {
		p := newPGSchemas(b)
		p.durable = true // measure commits as they are in production
		s = p.open(b, "bench")
	} else {
		s = openSQLite(b, b.TempDir(), "bench")
	}
	b.Cleanup(func() { s.Close() })
	m, err := s.CreateModel(context.Background(), muster.Model{Name: "bench", Provider: "sim"})
	if err != nil {
		b.Fatal(err)
	}
	return s, m.UUID
}

// BenchmarkAddMachines1000 adds 1,000 machines in one call.
func BenchmarkAddMachines1000(b *testing.B) {
	for _, be := range backends() {
		b.Run(be, func(b *testing.B) { benchAddMachines(b, be) })
	}
}

func benchAddMachines(b *testing.B, backend string) {
	s, model := benchModel(b, backend)
	ts := make([]muster.MachineTemplate, 1000)
	for i := range ts {
		ts[i] = muster.MachineTemplate{Constraints: muster.MustParseConstraints("cores=2 mem=4G"), Group: "web"}
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.AddMachines(ctx, model, ts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ts)), "ns/machine")
}

// BenchmarkUpdateMachines updates 1,000 machines per call, in batches of
// the given size.
func BenchmarkUpdateMachines(b *testing.B) {
	for _, be := range backends() {
		b.Run(be, func(b *testing.B) { benchUpdateMachines(b, be) })
	}
}

func benchUpdateMachines(b *testing.B, backend string) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			s, model := benchModel(b, backend)
			// Cancellable, as a request's context is.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ms, err := s.AddMachines(ctx, model, make([]muster.MachineTemplate, 1000))
			if err != nil {
				b.Fatal(err)
			}
			us := make([]muster.MachineUpdate, len(ms))
			n := 0
			b.ResetTimer()
			for b.Loop() {
				n++
				msg := "pass " + strconv.Itoa(n)
				for i, m := range ms {
					us[i] = muster.MachineUpdate{ID: m.ID, Status: muster.Ptr(muster.StatusStarted), StatusMessage: &msg}
				}
				for i := 0; i < len(us); i += batch {
					if err := s.UpdateMachines(ctx, model, us[i:min(i+batch, len(us))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ms)), "ns/machine")
		})
	}
}

// BenchmarkEnrol enrols batches of 50 agents as the API does (a started
// report and three events each, in the enrolment's transaction).
func BenchmarkEnrol(b *testing.B) {
	for _, be := range backends() {
		b.Run(be, func(b *testing.B) { benchEnrol(b, be) })
	}
}

func benchEnrol(b *testing.B, backend string) {
	const batch = 50
	s, model := benchModel(b, backend)
	ctx := context.Background()
	ts := make([]muster.MachineTemplate, batch)
	then := func(m muster.Machine) (*muster.MachineUpdate, []muster.Event) {
		ev := func(kind string) muster.Event {
			return muster.Event{ModelUUID: model, MachineID: m.ID, Actor: "agent/" + m.ID, Kind: kind, Message: "machine " + m.ID + " " + kind}
		}
		return &muster.MachineUpdate{Status: muster.Ptr(muster.StatusStarted)}, []muster.Event{ev("enrol"), ev("login"), ev("started")}
	}
	for b.Loop() {
		b.StopTimer()
		ms, err := s.AddMachines(ctx, model, ts)
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, batch)
		recs := make([]muster.InstanceRecord, batch)
		es := make([]muster.Enrolment, batch)
		for i, m := range ms {
			ids[i] = m.ID
			recs[i] = muster.InstanceRecord{MachineID: m.ID, Info: muster.InstanceInfo{InstanceID: "i-" + m.ID}}
			es[i] = muster.Enrolment{MachineID: m.ID, InstanceID: "i-" + m.ID, Token: "tok", PasswordHash: "h", Then: then}
		}
		if _, err := s.RecordInstances(ctx, model, recs); err != nil {
			b.Fatal(err)
		}
		if err := s.SetEnrolment(ctx, model, ids, muster.HashSecret("tok")); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		out, err := s.Enrol(ctx, model, es)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range out {
			if o.Err != nil {
				b.Fatal(o.Err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/enrolment")
}

// BenchmarkMachinesByID reads 500 of 10,000 machines by id, as the
// provisioner re-reads the machines a burst of changes named.
func BenchmarkMachinesByID(b *testing.B) {
	for _, be := range backends() {
		b.Run(be, func(b *testing.B) {
			s, model := benchModel(b, be)
			ctx := context.Background()
			var ids []string
			for range 10 {
				ms, err := s.AddMachines(ctx, model, make([]muster.MachineTemplate, 1000))
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range ms[:50] {
					ids = append(ids, m.ID)
				}
			}
			for b.Loop() {
				ms, err := s.Machines(ctx, model, ids)
				if err != nil || len(ms) != len(ids) {
					b.Fatalf("got %d machines, %v", len(ms), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/machine")
		})
	}
}
