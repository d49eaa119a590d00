package agent_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/internal/testutil"
)

// bootLog records which boots ran and which have ended.
type bootLog struct {
	mu            sync.Mutex
	booted, ended []string
}

func (b *bootLog) boot(name string) func(context.Context) {
	return func(ctx context.Context) {
		b.mu.Lock()
		b.booted = append(b.booted, name)
		b.mu.Unlock()
		<-ctx.Done()
		b.mu.Lock()
		b.ended = append(b.ended, name)
		b.mu.Unlock()
	}
}

func (b *bootLog) counts() (booted, ended int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.booted), len(b.ended)
}

func TestRunnerBootsAfterDelayReplacesStopsAndCloses(t *testing.T) {
	clock := fakeclock.New(start)
	r := agent.NewRunner(clock, time.Second)
	var log bootLog
	r.Start("i-1", log.boot("i-1 first"))
	r.Start("i-2", log.boot("i-2"))
	<-clock.WaitForTimers(2)
	if n := r.Count(); n != 2 {
		t.Fatalf("Count before boot: got %d, want 2", n)
	}
	clock.Advance(999 * time.Millisecond)
	if b, _ := log.counts(); b != 0 {
		t.Fatalf("booted before the boot delay: %d", b)
	}
	clock.Advance(time.Millisecond)
	testutil.Eventually(t, "both agents booted", func() bool { b, _ := log.counts(); return b == 2 })

	// A second start of i-1 replaces the first: it ends, the new one boots.
	r.Start("i-1", log.boot("i-1 second"))
	testutil.Eventually(t, "the replaced agent ended", func() bool { _, e := log.counts(); return e == 1 })
	<-clock.WaitForTimers(1)
	clock.Advance(time.Second)
	testutil.Eventually(t, "the replacement booted", func() bool { b, _ := log.counts(); return b == 3 })
	if n := r.Count(); n != 2 {
		t.Fatalf("Count after replacement: got %d, want 2", n)
	}

	r.Stop("i-2")
	r.Stop("i-unknown")
	testutil.Eventually(t, "the stopped agent gone", func() bool { _, e := log.counts(); return e == 2 && r.Count() == 1 })

	r.Close()
	if b, e := log.counts(); b != 3 || e != 3 || r.Count() != 0 {
		t.Fatalf("after Close: booted %d ended %d running %d, want 3 3 0", b, e, r.Count())
	}
	r.Start("i-3", log.boot("i-3")) // after Close: nothing
	r.Close()
	if n := r.Count(); n != 0 {
		t.Fatalf("Start after Close ran: Count %d", n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.ended[0] != "i-1 first" || log.ended[1] != "i-2" {
		t.Fatalf("end order: got %v, want i-1 first, i-2, …", log.ended)
	}
}

func TestRunnerStopBeforeBootNeverBoots(t *testing.T) {
	clock := fakeclock.New(start)
	r := agent.NewRunner(clock, time.Minute)
	defer r.Close()
	var log bootLog
	r.Start("i-1", log.boot("i-1"))
	<-clock.WaitForTimers(1)
	r.Stop("i-1")
	testutil.Eventually(t, "the stopped agent gone", func() bool { return r.Count() == 0 && clock.Timers() == 0 })
	clock.Advance(time.Hour)
	r.Close()
	if b, _ := log.counts(); b != 0 {
		t.Fatalf("an agent stopped before its boot booted")
	}
}

// disk is a simulated instance's disk: files by instance and path.
type disk map[string][]byte

func (d disk) IdentityDocument(id string) ([]byte, string, error) {
	return []byte("doc of " + id), "sig", nil
}

// stuck is a metadata service that answers only once released.
type stuck struct {
	disk
	release chan struct{}
}

func (s stuck) IdentityDocument(id string) ([]byte, string, error) {
	<-s.release
	return s.disk.IdentityDocument(id)
}
func (d disk) WriteFile(id, path string, b []byte) error { d[id+path] = b; return nil }
func (d disk) ReadFile(id, path string) ([]byte, bool)   { b, ok := d[id+path]; return b, ok }

// A simulated agent keeps its enrolled credentials on its instance's disk,
// without the controller's addresses and CA (every boot is given those),
// and boots with them again.
func TestSimulatedKeepsEnrolledConfig(t *testing.T) {
	d := disk{}
	enrolling := muster.AgentConfig{Model: "m", Machine: "3", EnrolToken: "tok", CACert: "CA", APIAddresses: []string{"https://a:1"}}
	cfg, opts := agent.Simulated(d, "i-3", enrolling, agent.Options{})
	if cfg.EnrolToken != "tok" || cfg.Password != "" {
		t.Fatalf("first boot: got %+v, want the enrolment config", cfg)
	}
	if doc, sig, err := opts.Identity(context.Background()); string(doc) != "doc of i-3" || sig != "sig" || err != nil {
		t.Fatalf("identity: got %q %q %v, want the instance's document", doc, sig, err)
	}
	enrolled := enrolling
	enrolled.EnrolToken, enrolled.Password, enrolled.Nonce = "", "pw", "nonce"
	if err := opts.OnEnrolled(enrolled); err != nil {
		t.Fatal(err)
	}
	if b, _ := d.ReadFile("i-3", agent.SimConfigPath); bytes.Contains(b, []byte("CA")) || bytes.Contains(b, []byte("https://a:1")) {
		t.Fatalf("kept config holds the CA or addresses: %s", b)
	}
	later := enrolling
	later.CACert, later.APIAddresses = "CA2", []string{"https://b:2"}
	cfg, _ = agent.Simulated(d, "i-3", later, agent.Options{})
	if cfg.Password != "pw" || cfg.Nonce != "nonce" || cfg.EnrolToken != "" || cfg.CACert != "CA2" || len(cfg.APIAddresses) != 1 || cfg.APIAddresses[0] != "https://b:2" {
		t.Fatalf("second boot: got %+v, want the kept credentials with this boot's CA and addresses", cfg)
	}
	// Another instance has nothing kept.
	if cfg, _ := agent.Simulated(d, "i-4", enrolling, agent.Options{}); cfg.EnrolToken != "tok" {
		t.Fatalf("other instance: got %+v", cfg)
	}
}

// A simulated agent stops waiting for a metadata service that does not
// answer when its context ends.
func TestSimulatedIdentityEndsWithContext(t *testing.T) {
	cloud := stuck{disk{}, make(chan struct{})}
	defer close(cloud.release)
	_, opts := agent.Simulated(cloud, "i-1", muster.AgentConfig{}, agent.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := opts.Identity(ctx); err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// StartPrepared makes the boot function as the boot delay begins: done
// before the delay ends, run only once it has; a nil one boots nothing.
func TestRunnerStartPreparedPreparesDuringTheDelay(t *testing.T) {
	clock := fakeclock.New(start)
	r := agent.NewRunner(clock, time.Second)
	defer r.Close()
	var log bootLog
	prepared := make(chan string, 2)
	r.StartPrepared("i-1", func() func(context.Context) {
		prepared <- "i-1"
		return log.boot("i-1")
	})
	r.StartPrepared("i-2", func() func(context.Context) {
		prepared <- "i-2"
		return nil
	})
	<-clock.WaitForTimers(2)
	for range 2 {
		select {
		case <-prepared:
		case <-time.After(10 * time.Second):
			t.Fatal("not prepared while the boot delay runs")
		}
	}
	if b, _ := log.counts(); b != 0 {
		t.Fatalf("booted before the boot delay: %d", b)
	}
	clock.Advance(time.Second)
	testutil.Eventually(t, "i-1 booted and i-2 done", func() bool { b, _ := log.counts(); return b == 1 && r.Count() == 1 })
}
