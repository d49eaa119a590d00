package muster

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Build describes the running binary: muster's version, and the commit
// and its date when the binary was built from a checkout (go build, go
// install of a module version, or go run in a git work tree).
type Build struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`     // "" when unknown
	Date      string `json:"build-date"` // the commit's time, RFC 3339; "" when unknown
	Modified  bool   `json:"modified"`   // built from a work tree with changes
	GoVersion string `json:"go"`
	Platform  string `json:"platform"`
}

// BuildInfo reads the running binary's Build (debug.ReadBuildInfo).
func BuildInfo() Build {
	b := Build{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Date = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	if b.Commit == "" && strings.Count(bi.Main.Version, "-") >= 2 {
		// A module pseudo-version (go install …@latest) ends in the commit.
		b.Commit = bi.Main.Version[strings.LastIndex(bi.Main.Version, "-")+1:]
	}
	return b
}

// String is the build on one line: "0.1.0 (commit 4d6a382+, 2026-12-03T13:00:00Z, go1.26 linux/amd64)".
func (b Build) String() string {
	commit, date := "unknown commit", "unknown build date"
	if b.Commit != "" {
		commit = "commit " + b.Commit[:min(12, len(b.Commit))]
		if b.Modified {
			commit += "+"
		}
	}
	if b.Date != "" {
		date = "built " + b.Date
	}
	return b.Version + " (" + commit + ", " + date + ", " + b.GoVersion + " " + b.Platform + ")"
}
