package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/musterhq/muster"
)

// Page sizes of the machine lists: GET .../machines and GET .../status
// with after= or limit=.
const (
	DefaultPageSize = 1000
	MaxPageSize     = 10000
)

// statusChunk is how many machines the streamed status reads from the
// store at a time.
const statusChunk = 1000

// MachineList is one page of GET /v1/models/{model}/machines?after=ID&limit=N:
// machines in id order.
type MachineList struct {
	Machines []MachineInfo `json:"machines"`
	// Next is the after= of the next page; "" on the last one.
	Next string `json:"next"`
}

// pageQuery reads after= and limit=; paged says whether either was given.
// The limit defaults to DefaultPageSize.
func pageQuery(r *http.Request) (after string, limit int, paged bool, err error) {
	q := r.URL.Query()
	after, limit = q.Get("after"), DefaultPageSize
	if q.Has("after") {
		if n, perr := strconv.ParseUint(after, 10, 63); perr != nil || strconv.FormatUint(n, 10) != after {
			return "", 0, false, muster.Errorf(muster.EInvalid, "bad after %q: want a machine id", muster.Printable(trim(after)))
		}
	}
	if q.Has("limit") {
		v := q.Get("limit")
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 || n > MaxPageSize || strconv.Itoa(n) != v {
			return "", 0, false, muster.Errorf(muster.EInvalid, "bad limit %q: want 1 to %d", muster.Printable(trim(v)), MaxPageSize)
		}
		limit = n
	}
	return after, limit, q.Has("after") || q.Has("limit"), nil
}

// handleMachines serves one page of the model's machines in full.
func (s *Server) handleMachines(w http.ResponseWriter, r *http.Request) error {
	after, limit, _, err := pageQuery(r)
	if err != nil {
		return err
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	ms, err := s.store.MachinesPage(r.Context(), m.UUID, after, limit)
	if err != nil {
		return err
	}
	out := MachineList{Machines: make([]MachineInfo, len(ms))}
	for i, mc := range ms {
		out.Machines[i] = machineInfo(mc)
	}
	if len(ms) == limit {
		out.Next = ms[len(ms)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// statusHead is Status without its machines, plus the next page's after=.
type statusHead struct {
	Model       string `json:"model"`
	Provider    string `json:"provider"`
	HarvestMode string `json:"harvest-mode"`
	statusRuntime
	Zones map[string]ZoneStatus `json:"zones"`
	Next  *string               `json:"next,omitempty"`
}

// streamStatus writes the model's whole status (limit 0), or the page of
// it after after, reading the machines from the store statusChunk at a
// time and encoding each as it comes: memory stays bounded whatever the
// model's size. The pages are not one snapshot: a machine changed while
// the status is written shows as it was when its chunk was read, and
// every machine appears at most once. An error after the first chunk
// aborts the response (the client sees it cut off, never a short but
// well-formed status).
func (s *Server) streamStatus(w http.ResponseWriter, r *http.Request, m muster.Model, after string, limit int) error {
	ctx := r.Context()
	chunk := statusChunk
	if limit > 0 {
		chunk = min(chunk, limit)
	}
	page, err := s.store.MachinesPage(ctx, m.UUID, after, chunk)
	if err != nil {
		return err
	}
	head := statusHead{Model: m.Name, Provider: m.Provider, HarvestMode: string(m.Settings.HarvestMode), Zones: map[string]ZoneStatus{}}
	head.statusRuntime = s.runtimeStatus(ctx, m.UUID)
	zones, err := s.zones(ctx, m.UUID)
	if err != nil {
		// Status stays useful while the provider is unreachable.
		s.logger.Warn("list zones for status", "model", m.Name, "err", err)
	}
	for _, z := range zones {
		head.Zones[z.Name] = ZoneStatus{Available: z.Available, Machines: z.Machines}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	// Machines are appended to b and written in pieces of about 32 KiB;
	// a failed write stops the writing, and is returned at the end.
	b := append(make([]byte, 0, 36<<10), `{"machines":{`...)
	var werr error
	write := func() {
		if werr == nil {
			_, werr = w.Write(b)
		}
		b = b[:0]
	}
	written, last := 0, ""
	for len(page) > 0 {
		for _, mc := range page {
			if written > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, mc.ID)
			b = appendMachineJSON(append(b, ':'), machineStatus(mc), compact)
			written++
			if len(b) > 32<<10 {
				write()
			}
		}
		last = page[len(page)-1].ID
		if len(page) < chunk || (limit > 0 && written >= limit) {
			break
		}
		if limit > 0 {
			chunk = min(chunk, limit-written)
		}
		if page, err = s.store.MachinesPage(ctx, m.UUID, last, chunk); err != nil {
			if ctx.Err() == nil {
				s.logger.Log(ctx, slog.LevelError, "status cut off", "model", m.Name, "after", last, "err", err)
			}
			panic(http.ErrAbortHandler)
		}
	}
	if limit > 0 {
		next := ""
		if written == limit {
			next = last
		}
		head.Next = &next
	}
	hb, err := json.Marshal(head)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	b = append(append(b, "},"...), hb[1:]...) // the head's fields and its closing brace
	b = append(b, '\n')
	write()
	return werr
}
