package api_test

import (
	"context"
	"sync"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

// pagingStore records the event reads the server makes.
type pagingStore struct {
	muster.Store
	mu    sync.Mutex
	reads []muster.EventFilter
	sizes []int
}

func (p *pagingStore) Events(ctx context.Context, model string, f muster.EventFilter) ([]muster.Event, error) {
	es, err := p.Store.Events(ctx, model, f)
	p.mu.Lock()
	p.reads = append(p.reads, f)
	p.sizes = append(p.sizes, len(es))
	p.mu.Unlock()
	return es, err
}

// TestStreamBacklogInPages checks S7: a stream replays a long backlog in
// order, reading it from the store a bounded page at a time.
func TestStreamBacklogInPages(t *testing.T) {
	var ps *pagingStore
	h := newHarness(t, func(c *api.Config) { ps = &pagingStore{Store: c.Store}; c.Store = ps })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 700
	es := make([]muster.Event, n)
	for i := range es {
		es[i] = muster.Event{ModelUUID: h.model.UUID, Kind: "note"}
	}
	if err := h.store.AppendEvents(ctx, es); err != nil {
		t.Fatal(err)
	}
	s, err := h.admin.FollowEvents(ctx, "default", api.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := collect(t, s, n)
	for i, e := range got {
		if e.Seq != es[i].Seq {
			t.Fatalf("event %d: got seq %d, want %d (in order, none missed)", i, e.Seq, es[i].Seq)
		}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.reads) < 3 {
		t.Fatalf("got %d reads for a backlog of %d, want it read in pages", len(ps.reads), n)
	}
	for i, f := range ps.reads {
		if f.Page <= 0 || f.Page > 1000 || ps.sizes[i] > f.Page {
			t.Fatalf("read %d: filter %+v gave %d events, want a bounded page", i, f, ps.sizes[i])
		}
	}
}

// TestStreamsPerSession checks S7: one session holds at most 8 streams;
// closing one makes room.
func TestStreamsPerSession(t *testing.T) {
	h := newHarness(t)
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	open := func() (*api.EventStream, context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := h.admin.FollowEvents(ctx, "default", api.FollowOptions{})
		if err != nil {
			cancel()
			return nil, nil, err
		}
		cancels = append(cancels, cancel)
		return s, cancel, nil
	}
	var streams []*api.EventStream
	for i := 0; i < api.MaxStreamsPerSession; i++ {
		s, _, err := open()
		if err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		streams = append(streams, s)
	}
	_, _, err := open()
	wantCode(t, err, muster.EUnavailable)
	// Closing one frees its place.
	cancels[0]()
	for range streams[0].C() {
	}
	testutil.Eventually(t, "a stream's place freed", func() bool {
		_, _, err := open()
		return err == nil
	})
}
