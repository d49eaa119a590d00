package muster

import (
	"runtime"
	"strings"
	"testing"
)

func TestBuildString(t *testing.T) {
	b := Build{Version: "1.2.3", Commit: "0123456789abcdef0123", Date: "2026-12-03T13:00:00Z", Modified: true, GoVersion: "go1.26", Platform: "linux/amd64"}
	if got, want := b.String(), "1.2.3 (commit 0123456789ab+, built 2026-12-03T13:00:00Z, go1.26 linux/amd64)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (Build{Version: "1"}).String(); !strings.Contains(got, "unknown commit") || !strings.Contains(got, "unknown build date") {
		t.Errorf("an unknown build: %q", got)
	}
	if bi := BuildInfo(); bi.Version != Version || bi.GoVersion != runtime.Version() {
		t.Errorf("BuildInfo() = %+v", bi)
	}
}
