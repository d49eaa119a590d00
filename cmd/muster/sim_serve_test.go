package main

import (
	"bufio"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/sim"
)

// startSimServe runs `muster sim serve` with args in-process and returns
// its base URL and a function that stops it and returns its exit status.
func startSimServe(tb testing.TB, args ...string) (url string, stop func() int) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"sim", "serve", "--listen", "127.0.0.1:0"}, args...), strings.NewReader(""), pw, io.Discard)
		pw.Close()
		done <- code
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		tb.Fatalf("sim serve printed no first line (exit %d): %v", <-done, err)
	}
	go io.Copy(io.Discard, pr)
	const prefix = "sim listening on "
	if !strings.HasPrefix(line, prefix) {
		cancel()
		tb.Fatalf("first line %q, want it to start with %q", line, prefix)
	}
	stopped := false
	var code int
	stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				tb.Fatalf("sim serve did not stop")
			}
		}
		return code
	}
	tb.Cleanup(func() { stop() })
	return strings.TrimSpace(strings.TrimPrefix(line, prefix)), stop
}

func TestSimServeKeepsStateAcrossRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "sim.json")
	url, stop := startSimServe(t, "--zones", "x,y:4", "--state", state)
	ctx := context.Background()
	client := sim.NewClient(url, nil)
	zs, err := client.Zones(ctx)
	if err != nil {
		t.Fatalf("Zones: %v", err)
	}
	if len(zs) != 2 || zs[0].Name != "x" || zs[0].Capacity != sim.Unlimited || zs[1].Name != "y" || zs[1].Capacity != 4 {
		t.Fatalf("got zones %+v, want x (unlimited) and y (4 cores)", zs)
	}
	inst, err := client.AddInstance(ctx, "y", "ctrl", "model")
	if err != nil {
		t.Fatalf("AddInstance: %v", err)
	}
	if code := stop(); code != 0 {
		t.Fatalf("sim serve exit %d, want 0", code)
	}

	url, _ = startSimServe(t, "--state", state)
	client = sim.NewClient(url, nil)
	if zs, err = client.Zones(ctx); err != nil || len(zs) != 2 || zs[1].Used != 1 {
		t.Fatalf("after restart got zones %+v (err %v), want x and y with 1 core used", zs, err)
	}
	insts, err := client.Provider("ctrl", "model").Instances(ctx)
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	if len(insts) != 1 || insts[0].ID != inst.ID {
		t.Fatalf("after restart got %v, want instance %s", insts, inst.ID)
	}
}

func TestSimServeBadZones(t *testing.T) {
	tests := []struct{ name, zones string }{
		{"empty name", "a,,b"},
		{"bad capacity", "a:many"},
		{"negative capacity", "a:-2"},
		{"duplicate", "a,a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, "sim", "serve", "--listen", "127.0.0.1:0", "--zones", tt.zones)
			if code != 2 || !strings.HasPrefix(errOut, "error: ") {
				t.Errorf("got exit %d, stderr %q, want 2 and an error line", code, errOut)
			}
		})
	}
}

// TestSimServeEC2Line: the second line names the EC2 endpoint and the key
// pair, which --ec2-access-key/--ec2-secret-key set together only.
func TestSimServeEC2Line(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"sim", "serve", "--listen", "127.0.0.1:0", "--ec2-access-key", "AKIATESTKEY000000000", "--ec2-secret-key", "s3cret"},
			strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	r := bufio.NewReader(pr)
	first, _ := r.ReadString('\n')
	second, _ := r.ReadString('\n')
	go io.Copy(io.Discard, pr)
	cancel()
	<-done
	url := strings.TrimSpace(strings.TrimPrefix(first, "sim listening on "))
	want := "EC2 API at " + url + " (region: any; AWS_ACCESS_KEY_ID=AKIATESTKEY000000000 AWS_SECRET_ACCESS_KEY=s3cret)\n"
	if second != want {
		t.Errorf("second line %q, want %q", second, want)
	}
	if code, _, errOut := runCLI(t, "sim", "serve", "--listen", "127.0.0.1:0", "--ec2-access-key", "AKIATESTKEY000000000"); code != 2 || !strings.Contains(errOut, "go together") {
		t.Errorf("an access key without a secret: exit %d, %q; want 2 and a usage error", code, errOut)
	}
}
