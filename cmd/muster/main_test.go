package main

import (
	"bytes"
	"context"
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
	code, out, errOut := runCLI(t, "version")
	if code != 0 || errOut != "" {
		t.Fatalf("version: exit %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(out, "muster "+muster.Version+"\n") {
		t.Fatalf("got %q, want it to start with the version", out)
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
