package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster"
)

// runCLI runs one command line in-process and returns its exit status and
// output.
func runCLI(tb testing.TB, args ...string) (code int, stdout, stderr string) {
	tb.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	t.Setenv("MUSTER_CONFIG", filepath.Join(t.TempDir(), "none.yaml"))
	code, out, errOut := runCLI(t, "version")
	if code != 0 || errOut != "" {
		t.Fatalf("version: exit %d, stderr %q", code, errOut)
	}
	client := "muster " + muster.BuildInfo().String()
	if want := "client:     " + client + "\ncontroller: unknown ("; !strings.HasPrefix(out, want) || !strings.Contains(out, "none.yaml") {
		t.Fatalf("got %q, want it to start with %q and say why the controller's is unknown", out, want)
	}
	code, out, _ = runCLI(t, "--version")
	if code != 0 || out != client+"\n" {
		t.Fatalf("--version: exit %d, %q; want %q", code, out, client)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"no-such-command"}, {"version", "extra"}, {"version", "--bogus"}} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: stderr %q, want one line starting with error:", args, errOut)
		}
	}
}
