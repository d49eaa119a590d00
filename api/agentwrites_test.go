package api

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
)

// gatedStore holds the first UpdateMachines until released, and counts
// the calls.
type gatedStore struct {
	muster.Store
	gate chan struct{}
	once sync.Once
	mu   sync.Mutex
	n    int
}

func (g *gatedStore) UpdateMachines(ctx context.Context, model string, us []muster.MachineUpdate, es ...muster.Event) error {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	g.once.Do(func() { <-g.gate })
	return g.Store.UpdateMachines(ctx, model, us, es...)
}

func (g *gatedStore) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// TestAgentWritesGroupCommit: writes queued while a transaction runs go
// in the next one together, each with its own outcome: a write for a
// removed machine fails alone.
func TestAgentWritesGroupCommit(t *testing.T) {
	ctx := context.Background()
	st, m := storeWithModel(t)
	if _, err := st.AddMachines(ctx, m.UUID, make([]muster.MachineTemplate, 6)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ids   []string // queued behind the first write
		calls int      // UpdateMachines calls in all
	}{
		{"all good", []string{"1", "2", "3", "4"}, 2},
		{"one gone", []string{"1", "2", "99", "4"}, 2 + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := &gatedStore{Store: st, gate: make(chan struct{})}
			a := newAgentWrites(gs)
			write := func(id string) error {
				msg := "from " + tc.name
				return a.write(ctx, m.UUID, &muster.MachineUpdate{ID: id, StatusMessage: &msg},
					muster.Event{ModelUUID: m.UUID, MachineID: id, Kind: "test", Message: msg})
			}
			first := make(chan error, 1)
			go func() { first <- write("0") }()
			testutil.Eventually(t, "first write in the store", func() bool { return gs.calls() == 1 })
			errs := make([]chan error, len(tc.ids))
			for i, id := range tc.ids {
				errs[i] = make(chan error, 1)
				go func() { errs[i] <- write(id) }()
			}
			testutil.Eventually(t, "writes queued", func() bool {
				a.updates.mu.Lock()
				defer a.updates.mu.Unlock()
				return len(a.updates.pending[m.UUID]) == len(tc.ids)
			})
			close(gs.gate)
			if err := <-first; err != nil {
				t.Fatalf("first write: %v", err)
			}
			for i, id := range tc.ids {
				err := <-errs[i]
				if want := id == "99"; (err != nil) != want || want && !muster.IsCode(err, muster.ENotFound) {
					t.Errorf("write of machine %s: %v", id, err)
				}
				if id != "99" {
					if mc, _ := st.Machine(ctx, m.UUID, id); mc.StatusMessage != "from "+tc.name {
						t.Errorf("machine %s: message %q not written", id, mc.StatusMessage)
					}
				}
			}
			if got := gs.calls(); got != tc.calls {
				t.Errorf("store transactions: %d, want %d", got, tc.calls)
			}
		})
	}
}

// gatedEnrols holds the first Enrol until released, and counts the calls
// and the enrolments they carried.
type gatedEnrols struct {
	muster.Store
	gate chan struct{}
	once sync.Once
	mu   sync.Mutex
	n    []int
}

func (g *gatedEnrols) Enrol(ctx context.Context, model string, es []muster.Enrolment) ([]muster.Enrolled, error) {
	g.mu.Lock()
	g.n = append(g.n, len(es))
	g.mu.Unlock()
	g.once.Do(func() { <-g.gate })
	return g.Store.Enrol(ctx, model, es)
}

func (g *gatedEnrols) calls() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.n...)
}

// TestEnrolsGroupCommit: enrolments queued while one commits go to the
// store together in one call, each with its own outcome; one whose
// request went away meanwhile is left out and enrols later.
func TestEnrolsGroupCommit(t *testing.T) {
	ctx := context.Background()
	st, m := storeWithModel(t)
	if _, err := st.AddMachines(ctx, m.UUID, make([]muster.MachineTemplate, 5)); err != nil {
		t.Fatal(err)
	}
	const tok = "batch-token"
	for i := 0; i < 5; i++ {
		id := strconv.Itoa(i)
		if err := st.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: id, Nonce: muster.Ptr("n" + id)}}); err != nil {
			t.Fatal(err)
		}
		if errs, err := st.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: id, Nonce: "n" + id,
			Info: muster.InstanceInfo{InstanceID: "i-" + id}}}); err != nil || errs[0] != nil {
			t.Fatalf("record: %v %v", errs, err)
		}
	}
	if err := st.SetEnrolment(ctx, m.UUID, []string{"0", "1", "2", "3", "4"}, muster.HashSecret(tok)); err != nil {
		t.Fatal(err)
	}
	gs := &gatedEnrols{Store: st, gate: make(chan struct{})}
	a := newAgentWrites(gs)
	enrol := func(ctx context.Context, id, token string) (muster.Machine, error) {
		return a.enrol(ctx, m.UUID, muster.Enrolment{MachineID: id, InstanceID: "i-" + id, Token: token, PasswordHash: "h" + id})
	}
	type result struct {
		m   muster.Machine
		err error
	}
	first := make(chan result, 1)
	go func() { mc, err := enrol(ctx, "0", tok); first <- result{mc, err} }()
	testutil.Eventually(t, "first enrolment in the store", func() bool { return len(gs.calls()) == 1 })
	gone, cancel := context.WithCancel(ctx)
	queued := map[string]chan result{}
	for _, id := range []string{"1", "2", "3"} {
		c, token := ctx, tok
		switch id {
		case "2":
			token = "forged"
		case "3":
			c = gone
		}
		queued[id] = make(chan result, 1)
		go func() { mc, err := enrol(c, id, token); queued[id] <- result{mc, err} }()
	}
	testutil.Eventually(t, "enrolments queued", func() bool {
		a.enrols.mu.Lock()
		defer a.enrols.mu.Unlock()
		return len(a.enrols.pending[m.UUID]) == 3
	})
	cancel()
	if r := <-queued["3"]; r.err == nil {
		t.Errorf("enrolment whose request went away: %+v, want its context's error", r.m)
	}
	close(gs.gate)
	if r := <-first; r.err != nil || r.m.ID != "0" || r.m.Nonce != "n0" {
		t.Fatalf("first enrolment: %+v %v", r.m, r.err)
	}
	if r := <-queued["1"]; r.err != nil || r.m.ID != "1" {
		t.Errorf("queued enrolment of machine 1: %+v %v", r.m, r.err)
	}
	if r := <-queued["2"]; !muster.IsCode(r.err, muster.EUnauthorized) {
		t.Errorf("queued enrolment with a forged token: %v, want unauthorized", r.err)
	}
	testutil.Eventually(t, "the batch committed", func() bool { return len(gs.calls()) == 2 })
	if got := gs.calls(); got[0] != 1 || got[1] != 2 {
		t.Errorf("store calls carried %v enrolments, want [1 2] (the gone request left out)", got)
	}
	if mc, err := enrol(ctx, "3", tok); err != nil || mc.ID != "3" {
		t.Errorf("machine 3 enrolling again: %+v %v; want its credentials (never handed out)", mc, err)
	}
}

// TestGroupCommitLingers: an idle committer commits the first item at
// once; after a commit it lingers for the burst's next items when few
// wait, and not when a batch's worth waits already.
func TestGroupCommitLingers(t *testing.T) {
	var mu sync.Mutex
	var log []string
	note := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	logged := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), log...)
	}
	hold := make(chan struct{})      // holds the first commit
	lingering := make(chan struct{}) // the first linger began
	release := make(chan struct{})   // ends the first linger
	var lingers int
	g := &groupCommit[int]{
		commit: func(model string, items []int) []error {
			note("commit " + strconv.Itoa(len(items)))
			if len(logged()) == 1 {
				<-hold
			}
			return make([]error, len(items))
		},
		linger: func() {
			note("linger")
			lingers++
			if lingers == 1 {
				close(lingering)
				<-release
			}
		},
	}
	queue := func(n int) chan error { return queueItems(g, n) }
	wait := func(errs chan error, n int) {
		t.Helper()
		waitCommitted(t, errs, n, func() string { return fmt.Sprintf("the committer did %q", logged()) })
	}
	first := queue(1)
	testutil.Eventually(t, "the first item committed at once", func() bool { return len(logged()) == 1 })
	// A batch's worth queued behind the held commit goes without a linger.
	big := queue(lingerBelow + 8)
	testutil.Eventually(t, "items queued", func() bool { return g.queued() == lingerBelow+8 })
	close(hold)
	wait(first, 1)
	wait(big, lingerBelow+8)
	select {
	case <-lingering:
	case <-time.After(10 * time.Second):
		t.Fatalf("no linger after a commit; the committer did %q", logged())
	}
	// A few items arriving while the committer lingers go together.
	few := queue(5)
	testutil.Eventually(t, "items queued", func() bool { return g.queued() == 5 })
	close(release)
	wait(few, 5)
	testutil.Eventually(t, "the committer done", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.busy
	})
	want := []string{"commit 1", "commit " + strconv.Itoa(lingerBelow+8), "linger", "commit 5", "linger"}
	if got := logged(); !reflect.DeepEqual(got, want) {
		t.Fatalf("committer did %q, want %q", got, want)
	}
}

// TestGroupCommitLingerEndsWhenFull: a lingering committer does not wait
// out its linger once a batch's worth of items waits: it commits them at
// once, together.
func TestGroupCommitLingerEndsWhenFull(t *testing.T) {
	var mu sync.Mutex
	var batches []int
	g := &groupCommit[int]{
		commit: func(model string, items []int) []error {
			mu.Lock()
			batches = append(batches, len(items))
			mu.Unlock()
			return make([]error, len(items))
		},
		lingerFor: time.Minute, // only a full queue ends it within the test
	}
	if err := g.do(context.Background(), "m", 0); err != nil { // committed at once; the committer lingers
		t.Fatal(err)
	}
	waitCommitted(t, queueItems(g, lingerBelow), lingerBelow, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d queued behind a lingering committer; batches %v", lingerBelow, batches)
	})
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, lingerBelow}; !reflect.DeepEqual(batches, want) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
}

// queueItems queues items 0…n-1 of model "m" in g, each from a goroutine
// of its own, and returns their outcomes' channel.
func queueItems(g *groupCommit[int], n int) chan error {
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- g.do(context.Background(), "m", i) }()
	}
	return errs
}

// waitCommitted waits for n outcomes on errs, failing the test on an error
// or when they do not all come within 10 s (what says what was seen).
func waitCommitted(t *testing.T, errs chan error, n int, what func() string) {
	t.Helper()
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("items not committed: %s", what())
		}
	}
}
