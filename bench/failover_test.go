package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The overlap check reads the runs from the controllers' JSON logs: a run
// left open by a kill ends at the kill, and two runs that share a moment
// count as an overlap.
func TestProvisionerRunsAndOverlaps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rec := func(s float64, msg string) string {
		return `{"time":"` + at(s).Format(time.RFC3339Nano) + `","level":"INFO","msg":"` + msg + `"}`
	}
	// a runs 0–1 s, stops, runs again from 2 s and is killed at 5 s.
	a := &ctrlProc{log: write("a.log", rec(0, "provisioner started"), rec(1, "provisioner stopped"), rec(2, "provisioner started"), `{"time":"x`), killed: at(5)}
	ra, err := provisionerRuns(a)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]time.Time{{at(0), at(1)}, {at(2), at(5)}}; len(ra) != 2 || ra[0] != want[0] || ra[1] != want[1] {
		t.Fatalf("got runs %v, want %v", ra, want)
	}
	// b takes over after the kill: no overlap.
	b := &ctrlProc{log: write("b.log", rec(5.5, "provisioner started"), rec(7, "provisioner stopped"))}
	rb, err := provisionerRuns(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := overlaps(append(ra, rb...)); n != 0 {
		t.Errorf("got %d overlaps, want 0", n)
	}
	// c starts while a still runs: one overlap.
	c := &ctrlProc{log: write("c.log", rec(4.9, "provisioner started"), rec(5.2, "provisioner stopped"))}
	rc, err := provisionerRuns(c)
	if err != nil {
		t.Fatal(err)
	}
	if n := overlaps(append(append(ra, rb...), rc...)); n != 1 {
		t.Errorf("got %d overlaps, want 1", n)
	}
}

// Without a PostgreSQL database the scenario says what it needs, on one
// line.
func TestFailoverNeedsPostgres(t *testing.T) {
	t.Setenv("MUSTER_TEST_POSTGRES", "")
	var out, errOut bytes.Buffer
	err := run([]string{"--scenario", "failover"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "MUSTER_TEST_POSTGRES") || strings.Contains(err.Error(), "\n") {
		t.Errorf("got err %v, want one line naming MUSTER_TEST_POSTGRES", err)
	}
}
