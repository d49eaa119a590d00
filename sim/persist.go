package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/musterhq/muster"
)

// The state file is a snapshot line followed by record lines. Appending a
// line per change keeps the cost of a change independent of the number of
// instances; the file is compacted into a new snapshot once the records
// outnumber the instances.

// state is the snapshot, the first line of the state file.
type state struct {
	Version   int                 `json:"version"`
	Zones     []ZoneConfig        `json:"zones"`
	Faults    Faults              `json:"faults"`
	Instances []persistedInstance `json:"instances"`
	// Reservations are the EC2 API's reservations with a client token,
	// kept for the cloud's lifetime (idempotency).
	Reservations []reservation `json:"reservations,omitempty"`
	// Ended are the terminated instances the EC2 API still lists.
	Ended []tombstone `json:"ended,omitempty"`
	// IdentityKey is the PEM key that signs instance identity documents.
	IdentityKey string `json:"identity-key,omitempty"`
}

const stateVersion = 2

// record is one change, a line after the snapshot.
type record struct {
	Put    *persistedInstance `json:"put,omitempty"`
	Del    string             `json:"del,omitempty"`
	Ended  *time.Time         `json:"ended,omitempty"` // with Del: terminated then, not rolled back
	Config *config            `json:"config,omitempty"`
	// Reservation is an EC2 reservation with a client token, new or
	// replacing the one of its token.
	Reservation *reservation `json:"reservation,omitempty"`
	// File is a file written on an instance's disk (WriteFile): only the
	// file, not the whole instance again.
	File *fileRecord `json:"file,omitempty"`
}

type fileRecord struct {
	ID   string `json:"id"`
	Path string `json:"path"`
	Data []byte `json:"data"`
}

type config struct {
	Zones  []ZoneConfig `json:"zones"`
	Faults Faults       `json:"faults"`
}

// reservation is a launch made with a client token, kept for the cloud's
// lifetime so that the token stays idempotent.
type reservation struct {
	ID          string `json:"id"`
	ClientToken string `json:"client-token"`
	// Fingerprint sums up the request (LaunchRequest.Fingerprint); empty
	// in state files written before it was kept, which match any repeat.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Instances are the reservation's instances as launched.
	Instances []Instance `json:"instances"`
}

type persistedInstance struct {
	Instance
	Params *muster.StartParams `json:"params,omitempty"`
	// Files are what was written to the instance's disk (WriteFile).
	Files map[string][]byte `json:"files,omitempty"`
}

// readState reads a state file and replays its records; nil when there is
// no file. A torn last line (a crash while appending) is ignored.
func readState(path string) (*state, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sim: read state: %w", err)
	}
	defer f.Close()
	bad := func(format string, args ...any) error {
		return muster.Errorf(muster.EInvalid, "sim: state file %s is not valid: %s", path, fmt.Sprintf(format, args...))
	}
	r := bufio.NewReader(f)
	first, err := r.ReadBytes('\n')
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("sim: read state: %w", err)
	}
	var st state
	if err := json.Unmarshal(first, &st); err != nil {
		return nil, bad("%v", err)
	}
	if st.Version != stateVersion {
		return nil, bad("version %d, want %d", st.Version, stateVersion)
	}
	order := []string{}
	insts := map[string]persistedInstance{}
	ended := st.Ended
	resOrder := []string{}
	res := map[string]reservation{}
	for _, r := range st.Reservations {
		if _, ok := res[r.ClientToken]; !ok {
			resOrder = append(resOrder, r.ClientToken)
		}
		res[r.ClientToken] = r
	}
	for _, pi := range st.Instances {
		if _, ok := insts[pi.ID]; !ok {
			order = append(order, pi.ID)
		}
		insts[pi.ID] = pi
	}
	for line := 2; ; line++ {
		b, err := r.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("sim: read state: %w", err)
		}
		if len(bytes.TrimSpace(b)) == 0 && err == io.EOF {
			break
		}
		var rec record
		if jerr := json.Unmarshal(b, &rec); jerr != nil {
			if err == io.EOF {
				break // torn last line
			}
			return nil, bad("line %d: %v", line, jerr)
		}
		switch {
		case rec.Put != nil:
			if _, ok := insts[rec.Put.ID]; !ok {
				order = append(order, rec.Put.ID)
			}
			insts[rec.Put.ID] = *rec.Put
		case rec.Del != "":
			if pi, ok := insts[rec.Del]; ok && rec.Ended != nil {
				pi.Instance.State = "terminated"
				ended = append(ended, tombstone{Instance: pi.Instance, Ended: *rec.Ended})
			}
			delete(insts, rec.Del)
		case rec.Config != nil:
			st.Zones, st.Faults = rec.Config.Zones, rec.Config.Faults
		case rec.File != nil:
			if pi, ok := insts[rec.File.ID]; ok {
				files := make(map[string][]byte, len(pi.Files)+1)
				maps.Copy(files, pi.Files)
				files[rec.File.Path] = rec.File.Data
				pi.Files = files
				insts[rec.File.ID] = pi
			}
		case rec.Reservation != nil:
			r := *rec.Reservation
			if _, ok := res[r.ClientToken]; !ok {
				resOrder = append(resOrder, r.ClientToken)
			}
			res[r.ClientToken] = r
		default:
			return nil, bad("line %d: empty record", line)
		}
		if err == io.EOF {
			break
		}
	}
	st.Instances = st.Instances[:0]
	for _, id := range order {
		if pi, ok := insts[id]; ok {
			st.Instances = append(st.Instances, pi)
			delete(insts, id)
		}
	}
	st.Ended = ended
	st.Reservations = nil
	for _, tok := range resOrder {
		st.Reservations = append(st.Reservations, res[tok])
	}
	return &st, nil
}

// logPut, logDel and logConfig queue a record of a change; c.mu is held.
func (c *Cloud) logPut(inst *Instance) {
	if c.file != "" {
		c.logRecord(record{Put: &persistedInstance{Instance: *inst, Params: c.params[inst.ID], Files: c.files[inst.ID]}})
	}
}

func (c *Cloud) logFile(id, path string, data []byte) {
	if c.file != "" {
		c.logRecord(record{File: &fileRecord{ID: id, Path: path, Data: data}})
	}
}

func (c *Cloud) logDel(id string) {
	if c.file != "" {
		c.logRecord(record{Del: id})
	}
}

func (c *Cloud) logConfig() {
	if c.file != "" {
		c.logRecord(record{Config: c.configLocked()})
	}
}

func (c *Cloud) configLocked() *config {
	cfg := &config{Faults: cloneFaults(c.faults)}
	for _, z := range c.zones {
		cfg.Zones = append(cfg.Zones, z.ZoneConfig)
	}
	return cfg
}

func (c *Cloud) logRecord(r record) {
	b, err := json.Marshal(r)
	if err != nil {
		// Cannot happen for these types; a snapshot will catch up.
		c.logger.Warn("sim state record not encoded", "err", err)
		c.needSnapshot = true
		return
	}
	c.journal = append(c.journal, append(b, '\n'))
}

// persist saves the state, logging rather than returning a failure: the
// change it records has happened in the cloud either way.
func (c *Cloud) persist() {
	if c.file == "" {
		return
	}
	if c.saveDelay > 0 {
		select {
		case c.kick <- struct{}{}:
		default:
		}
		return
	}
	if err := c.save(false); err != nil {
		c.logger.Warn("sim state not saved", "file", c.file, "err", err)
	}
}

// save appends the queued records to the state file, or writes a new
// snapshot when forced, when the records have grown past the instances or
// after a failed append. Callers that arrive while a write is in progress
// wait for it and find their records written by the next, so concurrent
// changes share writes.
func (c *Cloud) save(force bool) error {
	if c.file == "" {
		return nil
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.closed {
		return nil
	}
	c.mu.Lock()
	if len(c.journal) == 0 && !force && !c.w.broken && !c.needSnapshot {
		c.mu.Unlock()
		return nil
	}
	if force || c.w.broken || c.needSnapshot || c.w.out == nil || c.w.logged+len(c.journal) > max(1024, 2*len(c.instances)) {
		st := state{Version: stateVersion, Instances: []persistedInstance{}, IdentityKey: c.id.keyPEM}
		cfg := c.configLocked()
		st.Zones, st.Faults = cfg.Zones, cfg.Faults
		for _, inst := range c.sortedLocked() {
			st.Instances = append(st.Instances, persistedInstance{Instance: *inst, Params: c.params[inst.ID], Files: c.files[inst.ID]})
		}
		c.pruneTombsLocked(c.clock.Now())
		for _, id := range c.tombOrder {
			if t := c.tombs[id]; t != nil {
				st.Ended = append(st.Ended, *t)
			}
		}
		for _, r := range c.reservations {
			st.Reservations = append(st.Reservations, *r)
		}
		sort.Slice(st.Reservations, func(i, j int) bool { return st.Reservations[i].ID < st.Reservations[j].ID })
		c.journal, c.needSnapshot = nil, false
		b, err := json.Marshal(st)
		c.mu.Unlock()
		if err != nil {
			c.w.broken = true
			return fmt.Errorf("sim: encode state: %w", err)
		}
		return c.writeSnapshot(append(b, '\n'))
	}
	size := 0
	for _, b := range c.journal {
		size += len(b)
	}
	buf := make([]byte, 0, size)
	for _, b := range c.journal {
		buf = append(buf, b...)
	}
	n := len(c.journal)
	c.journal = nil
	c.mu.Unlock()
	if _, err := c.w.out.Write(buf); err != nil {
		c.w.broken = true
		return fmt.Errorf("sim: append to state file: %w", err)
	}
	c.w.logged += n
	return nil
}

// writeSnapshot replaces the state file with b and reopens it for
// appending; c.w.mu is held.
func (c *Cloud) writeSnapshot(b []byte) error {
	if c.w.out != nil {
		c.w.out.Close()
		c.w.out = nil
	}
	if err := writeFileAtomic(c.file, b); err != nil {
		c.w.broken = true
		return err
	}
	f, err := os.OpenFile(c.file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		c.w.broken = true
		return fmt.Errorf("sim: open state file: %w", err)
	}
	c.w.out, c.w.logged, c.w.broken = f, 0, false
	return nil
}

func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("sim: write state: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sim: write state: %w", err)
	}
	return nil
}
