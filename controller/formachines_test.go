package controller

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/sqlstore"
)

// TestForMachinesPages: the zone table of a model run elsewhere reads the
// machines a page at a time and sees each once, in id order, across page
// boundaries.
func TestForMachinesPages(t *testing.T) {
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "muster.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := st.CreateModel(ctx, muster.Model{Name: "m", Provider: "sim", Settings: muster.DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	n := 2*api.DefaultPageSize + 17
	if _, err := st.AddMachines(ctx, m.UUID, make([]muster.MachineTemplate, n)); err != nil {
		t.Fatal(err)
	}
	next := 0
	err = forMachines(ctx, st, m.UUID, func(mc muster.Machine) {
		if mc.ID != strconv.Itoa(next) {
			t.Fatalf("machine %s after %d", mc.ID, next-1)
		}
		next++
	})
	if err != nil || next != n {
		t.Fatalf("saw %d of %d machines, err %v", next, n, err)
	}
	if err := forMachines(ctx, st, "no-such-model", func(muster.Machine) {}); !muster.IsCode(err, muster.ENotFound) {
		t.Fatalf("unknown model: %v, want not-found", err)
	}
}
