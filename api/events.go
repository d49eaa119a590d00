package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

func eventInfo(e muster.Event) EventInfo {
	return EventInfo{Seq: e.Seq, Model: e.ModelUUID, Machine: e.MachineID, Time: e.Time, Actor: e.Actor, Kind: e.Kind, Message: e.Message}
}

func eventInfos(es []muster.Event) []EventInfo {
	out := make([]EventInfo, len(es))
	for i, e := range es {
		out[i] = eventInfo(e)
	}
	return out
}

// eventFilter reads the machine, after and limit query parameters.
func eventFilter(r *http.Request) (muster.EventFilter, error) {
	q := r.URL.Query()
	var f muster.EventFilter
	if id := q.Get("machine"); id != "" {
		ids, err := uniqueIDs([]string{id})
		if err != nil {
			return f, err
		}
		f.MachineID = ids[0]
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return f, muster.Errorf(muster.EInvalid, "bad after %q: want a sequence number", v)
		}
		f.AfterSeq = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, muster.Errorf(muster.EInvalid, "bad limit %q: want a whole number", v)
		}
		f.Limit = n
	}
	return f, nil
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) error {
	f, err := eventFilter(r)
	if err != nil {
		return err
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	es, err := s.store.Events(r.Context(), m.UUID, f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, eventInfos(es))
	return nil
}

// StreamKeepalive is the period of keepalive comments on an idle event
// stream, so proxies and clients see that it is still open.
const StreamKeepalive = 30 * time.Second

// MachinesEvent is the SSE event type that lists changed machine ids; log
// events use the default type ("message") and carry their seq as the id.
const MachinesEvent = "machines"

// MachinesChange is the data of a MachinesEvent.
type MachinesChange struct {
	Machines []string `json:"machines"`
}

// MaxStreamsPerSession bounds the event streams one session (the admin
// token, one dashboard sign-in) holds open at once (S7).
const MaxStreamsPerSession = 8

// streamPage is how many events a stream reads from the store at a time,
// so a long backlog is replayed with bounded memory (S7).
const streamPage = 256

// streamCounts counts the open event streams of each session.
type streamCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// open takes a stream for key, or refuses when it has MaxStreamsPerSession.
func (c *streamCounts) open(key string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= MaxStreamsPerSession {
		return nil, muster.Errorf(muster.EUnavailable, "this session has %d event streams open, the most allowed: close one first", MaxStreamsPerSession)
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n[key]--; c.n[key] <= 0 {
			delete(c.n, key)
		}
	}, nil
}

// handleEventStream serves a model's events as server-sent events: first
// the events after the resume point (Last-Event-ID, else ?after=, else the
// start of the log), then each event as it is appended, interleaved with
// "machines" events naming changed machines. It is driven by the store's
// watcher, not by polling.
func (s *Server) handleEventStream(w http.ResponseWriter, r *http.Request) error {
	f, err := eventFilter(r)
	if err != nil {
		return err
	}
	f.Limit = 0
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return muster.Errorf(muster.EInvalid, "bad Last-Event-ID %q: want a sequence number", v)
		}
		f.AfterSeq = n
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	release, err := s.streams.open(principalOf(r.Context()).key)
	if err != nil {
		return err
	}
	defer release()
	ctx := r.Context()
	rev, err := s.store.Revision(ctx)
	if err != nil {
		return err
	}
	// The watcher starts before the backlog is read, so nothing appended
	// in between is missed; seqs already sent are skipped.
	wt, err := s.store.Watch(ctx, m.UUID, rev, muster.ChangeEvent, muster.ChangeMachine)
	if err != nil {
		return err
	}
	defer wt.Close()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	f.Page = streamPage
	send := func() error {
		for {
			es, err := s.store.Events(ctx, m.UUID, f)
			if err != nil {
				return err
			}
			for _, e := range es {
				b, err := json.Marshal(eventInfo(e))
				if err != nil {
					return err
				}
				if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, b); err != nil {
					return err
				}
				f.AfterSeq = e.Seq
			}
			if err := rc.Flush(); err != nil {
				return err
			}
			if len(es) < f.Page {
				return nil
			}
		}
	}
	if err := send(); err != nil {
		s.logger.Debug("event stream ended", "model", m.Name, "err", err)
		return nil
	}
	keep := s.clock.NewTimer(StreamKeepalive)
	defer keep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case <-keep.C():
			if s.sessionEnded(ctx) {
				return nil
			}
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
			keep.Reset(StreamKeepalive)
		case cs, ok := <-wt.Changes():
			if !ok {
				if err := wt.Err(); err != nil && ctx.Err() == nil {
					s.logger.Warn("event stream watcher ended", "model", m.Name, "err", err)
				}
				return nil
			}
			if cs.Events {
				if err := send(); err != nil {
					return nil
				}
			}
			ids := cs.Machines
			if f.MachineID != "" {
				ids = nil
				for _, id := range cs.Machines {
					if id == f.MachineID {
						ids = []string{id}
					}
				}
			}
			if len(ids) > 0 {
				b, _ := json.Marshal(MachinesChange{Machines: ids})
				if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", MachinesEvent, b); err != nil {
					return nil
				}
				if err := rc.Flush(); err != nil {
					return nil
				}
			}
		}
	}
}
