package sqlstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/musterhq/muster"
)

func benchModel(b *testing.B) (muster.Store, string) {
	b.Helper()
	s := openSQLite(b, b.TempDir(), "bench")
	b.Cleanup(func() { s.Close() })
	m, err := s.CreateModel(context.Background(), muster.Model{Name: "bench", Provider: "sim"})
	if err != nil {
		b.Fatal(err)
	}
	return s, m.UUID
}

// BenchmarkAddMachines1000 adds 1,000 machines in one call.
func BenchmarkAddMachines1000(b *testing.B) {
	s, model := benchModel(b)
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
	for _, batch := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			s, model := benchModel(b)
			ctx := context.Background()
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
