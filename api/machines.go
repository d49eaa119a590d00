package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/musterhq/muster"
)

// uniqueIDs checks and de-duplicates machine ids, keeping their order.
func uniqueIDs(ids []string) ([]string, error) {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			return nil, muster.Errorf(muster.EInvalid, "bad machine id %q: want a number", id)
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// machinesByID reads the named machines; ENotFound naming every missing id.
func (s *Server) machinesByID(ctx context.Context, m muster.Model, ids []string) ([]muster.Machine, error) {
	ms, err := s.store.Machines(ctx, m.UUID, ids)
	if err != nil {
		return nil, err
	}
	if len(ms) == len(ids) {
		return ms, nil
	}
	found := make(map[string]bool, len(ms))
	for _, mc := range ms {
		found[mc.ID] = true
	}
	var missing []string
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) == 1 {
		return nil, muster.Errorf(muster.ENotFound, "machine %s not found in model %q", missing[0], m.Name)
	}
	return nil, muster.Errorf(muster.ENotFound, "machines %s not found in model %q", strings.Join(missing, ", "), m.Name)
}

func (s *Server) handleAddMachines(w http.ResponseWriter, r *http.Request) error {
	var req AddMachinesRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	ts, err := addMachinesTemplates(req)
	if err != nil {
		return err
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	if err := s.checkOffered(m, ts[0]); err != nil {
		return err
	}
	ms, err := s.store.AddMachines(r.Context(), m.UUID, ts)
	if err != nil {
		return err
	}
	actor := principalOf(r.Context()).actor()
	ids := make([]string, len(ms))
	es := make([]muster.Event, len(ms))
	for i, mc := range ms {
		ids[i] = mc.ID
		es[i] = muster.Event{ModelUUID: m.UUID, MachineID: mc.ID, Actor: actor, Kind: "add-machine", Message: describeMachine(mc)}
	}
	s.appendEvents(r.Context(), es)
	writeJSON(w, http.StatusCreated, MachineIDs{IDs: ids})
	return nil
}

// checkOffered refuses a machine the model's provider can never start.
func (s *Server) checkOffered(m muster.Model, t muster.MachineTemplate) error {
	if s.cfg.Runtime == nil {
		return nil
	}
	return s.cfg.Runtime.Offerings(m.UUID).Check(t)
}

func addMachinesTemplates(req AddMachinesRequest) ([]muster.MachineTemplate, error) {
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxAddMachines {
		return nil, muster.Errorf(muster.EInvalid, "bad count %d: want 1 to %d", req.Count, MaxAddMachines)
	}
	t, err := muster.NewMachineTemplate(req.Constraints, req.Group, req.Base, req.Placement, req.Storage)
	if err != nil {
		return nil, err
	}
	ts := make([]muster.MachineTemplate, n)
	for i := range ts {
		ts[i] = t
		ts[i].Storage = append([]muster.StorageDirective(nil), t.Storage...)
	}
	return ts, nil
}

func describeMachine(m muster.Machine) string {
	parts := []string{"machine " + m.ID + " declared", "base " + m.Base}
	if !m.Constraints.IsEmpty() {
		parts = append(parts, "constraints "+m.Constraints.String())
	}
	if m.Group != "" {
		parts = append(parts, "group "+m.Group)
	}
	if m.Placement != "" {
		parts = append(parts, "placement "+m.Placement)
	}
	return strings.Join(parts, ", ")
}

func (s *Server) handleRemoveMachines(w http.ResponseWriter, r *http.Request) error {
	var req RemoveMachinesRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.All == (len(req.IDs) > 0) {
		return muster.Errorf(muster.EInvalid, "give either machine ids or all, not both or neither")
	}
	ids, err := uniqueIDs(req.IDs)
	if err != nil {
		return err
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	var ms []muster.Machine
	if req.All {
		ms, err = s.store.Machines(r.Context(), m.UUID, nil)
		for _, mc := range ms {
			ids = append(ids, mc.ID)
		}
	} else {
		ms, err = s.machinesByID(r.Context(), m, ids)
	}
	if err != nil {
		return err
	}
	target := muster.LifeDying
	if req.Force {
		target = muster.LifeDead
	}
	actor := principalOf(r.Context()).actor()
	var us []muster.MachineUpdate
	var es []muster.Event
	for _, mc := range ms {
		u := muster.MachineUpdate{ID: mc.ID}
		if mc.Life != target && mc.Life.CanBecome(target) {
			u.Life = muster.Ptr(target)
		}
		if req.KeepInstance && !mc.KeepInstance {
			u.KeepInstance = muster.Ptr(true)
		}
		if u.Life == nil && u.KeepInstance == nil {
			continue
		}
		us = append(us, u)
		msg := fmt.Sprintf("machine %s marked %s", mc.ID, target)
		if u.Life == nil {
			msg = fmt.Sprintf("machine %s already %s", mc.ID, mc.Life)
		}
		if req.KeepInstance {
			msg += ", instance kept"
		}
		es = append(es, muster.Event{ModelUUID: m.UUID, MachineID: mc.ID, Actor: actor, Kind: "remove-machine", Message: msg})
	}
	if len(us) > 0 {
		if err := s.store.UpdateMachines(r.Context(), m.UUID, us); err != nil {
			return err
		}
		s.hb.setLives(m.UUID, us)
	}
	s.appendEvents(r.Context(), es)
	writeJSON(w, http.StatusOK, MachineIDs{IDs: ids})
	return nil
}

// RetryMessage is the instance message of a machine whose retry was asked for.
const RetryMessage = "retry requested"

func (s *Server) handleRetryProvisioning(w http.ResponseWriter, r *http.Request) error {
	var req RetryProvisioningRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.All == (len(req.IDs) > 0) {
		return muster.Errorf(muster.EInvalid, "give either machine ids or all, not both or neither")
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	var ms []muster.Machine
	if req.All {
		ms, err = s.store.Machines(r.Context(), m.UUID, nil)
	} else {
		var ids []string
		if ids, err = uniqueIDs(req.IDs); err == nil {
			ms, err = s.machinesByID(r.Context(), m, ids)
		}
	}
	if err != nil {
		return err
	}
	var retry []muster.Machine
	var notInError []string
	for _, mc := range ms {
		if mc.InstanceStatus == muster.InstanceProvisioningError && mc.Life == muster.LifeAlive {
			retry = append(retry, mc)
		} else {
			notInError = append(notInError, mc.ID)
		}
	}
	if !req.All && len(notInError) > 0 {
		return muster.Errorf(muster.EInvalid, "machine %s is not in provisioning error", strings.Join(notInError, ", "))
	}
	actor := principalOf(r.Context()).actor()
	ids := make([]string, 0, len(retry))
	us := make([]muster.MachineUpdate, 0, len(retry))
	es := make([]muster.Event, 0, len(retry))
	for _, mc := range retry {
		ids = append(ids, mc.ID)
		us = append(us, retryUpdate(mc.ID))
		es = append(es, muster.Event{ModelUUID: m.UUID, MachineID: mc.ID, Actor: actor, Kind: "retry",
			Message: fmt.Sprintf("retry of machine %s requested after: %s", mc.ID, mc.InstanceMessage)})
	}
	if len(us) > 0 {
		if err := s.store.UpdateMachines(r.Context(), m.UUID, us); err != nil {
			return err
		}
		s.hb.setLives(m.UUID, us)
	}
	s.appendEvents(r.Context(), es)
	writeJSON(w, http.StatusOK, MachineIDs{IDs: ids})
	return nil
}

func retryUpdate(id string) muster.MachineUpdate {
	return muster.MachineUpdate{
		ID:              id,
		Status:          muster.Ptr(muster.StatusPending),
		InstanceStatus:  muster.Ptr(muster.InstanceAllocating),
		InstanceMessage: muster.Ptr(RetryMessage),
		AutoRetries:     muster.Ptr(0),
	}
}

// machineEvents reads the machine of the request's path and its newest
// limit events.
func (s *Server) machineEvents(r *http.Request, limit int) (muster.Model, muster.Machine, []muster.Event, error) {
	m, err := s.model(r)
	if err != nil {
		return m, muster.Machine{}, nil, err
	}
	ids, err := uniqueIDs([]string{r.PathValue("id")})
	if err != nil {
		return m, muster.Machine{}, nil, err
	}
	ms, err := s.machinesByID(r.Context(), m, ids)
	if err != nil {
		return m, muster.Machine{}, nil, err
	}
	es, err := s.store.Events(r.Context(), m.UUID, muster.EventFilter{MachineID: ids[0], Limit: limit})
	return m, ms[0], es, err
}

func (s *Server) handleShowMachine(w http.ResponseWriter, r *http.Request) error {
	_, mc, es, err := s.machineEvents(r, ShowMachineEvents)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, MachineDetail{Machine: machineInfo(mc), Events: eventInfos(es)})
	return nil
}

func machineInfo(m muster.Machine) MachineInfo {
	mi := MachineInfo{
		ID:              m.ID,
		Life:            string(m.Life),
		Status:          string(m.Status),
		StatusMessage:   m.StatusMessage,
		InstanceStatus:  string(m.InstanceStatus),
		InstanceMessage: m.InstanceMessage,
		Constraints:     m.Constraints.String(),
		Base:            m.Base,
		Group:           m.Group,
		Placement:       m.Placement,
		Storage:         []string{},
		KeepInstance:    m.KeepInstance,
		Instance:        m.Instance,
		LaunchToken:     m.LaunchToken,
		Nonce:           m.Nonce,
		AutoRetries:     m.AutoRetries,
		Created:         m.Created,
		Updated:         m.Updated,
		Volumes:         []muster.Volume{},
		Attachments:     []muster.VolumeAttachment{},
	}
	for _, sd := range m.Storage {
		mi.Storage = append(mi.Storage, sd.String())
	}
	if !m.NextRetry.IsZero() {
		mi.NextRetry = muster.Ptr(m.NextRetry)
	}
	if m.Instance != nil {
		mi.Hardware = m.Instance.Hardware.String()
		if m.Instance.Volumes != nil {
			mi.Volumes = m.Instance.Volumes
		}
		if m.Instance.Attachments != nil {
			mi.Attachments = m.Instance.Attachments
		}
	}
	return mi
}

func machineStatus(m muster.Machine) MachineStatus {
	ms := MachineStatus{
		Life:            string(m.Life),
		Status:          string(m.Status),
		StatusMessage:   m.StatusMessage,
		InstanceStatus:  string(m.InstanceStatus),
		InstanceMessage: m.InstanceMessage,
		Group:           m.Group,
		Base:            m.Base,
		Constraints:     m.Constraints.String(),
		Addresses:       []string{},
		KeepInstance:    m.KeepInstance,
	}
	if m.Instance != nil {
		ms.InstanceID = m.Instance.InstanceID
		ms.Zone = instanceZone(m.Instance)
		ms.Hardware = m.Instance.Hardware.String()
		if len(m.Instance.Addresses) > 0 {
			ms.Addresses = m.Instance.Addresses
		}
	}
	return ms
}

func instanceZone(i *muster.InstanceInfo) string {
	if i.Zone != "" {
		return i.Zone
	}
	return i.Hardware.AvailabilityZone
}

// zones returns the model's zone table from the runtime; none without
// one.
func (s *Server) zones(ctx context.Context, modelUUID string) ([]ZoneInfo, error) {
	if s.cfg.Runtime == nil {
		return nil, nil
	}
	return s.cfg.Runtime.Zones(ctx, modelUUID)
}

// MaxStatusMachines bounds the ids of one GET .../status?machines=… .
const MaxStatusMachines = 1000

// statusFilter reads the optional machines query parameter of GET
// .../status: comma-separated ids. Nil means every machine.
func statusFilter(r *http.Request) ([]string, error) {
	q := r.URL.Query()
	if !q.Has("machines") {
		return nil, nil
	}
	ids := []string{}
	for _, v := range q["machines"] {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	ids, err := uniqueIDs(ids)
	if err != nil {
		return nil, err
	}
	if len(ids) > MaxStatusMachines {
		return nil, muster.Errorf(muster.EInvalid, "too many machines in one status request: %d, at most %d", len(ids), MaxStatusMachines)
	}
	return ids, nil
}

// handleStatus serves the model's status. With ?machines=1,2,3 (the
// dashboard's refresh of machines named by the event stream) "machines"
// holds only those of them that exist — an absent id was removed — and
// "zones" counts only them; the shape is unchanged.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) error {
	ids, err := statusFilter(r)
	if err != nil {
		return err
	}
	after, limit, paged, err := pageQuery(r)
	if err != nil {
		return err
	}
	if paged && ids != nil {
		return muster.Errorf(muster.EInvalid, "give either machines or after/limit, not both")
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	if ids == nil {
		if !paged {
			limit = 0 // the whole model
		}
		return s.streamStatus(w, r, m, after, limit)
	}
	var ms []muster.Machine
	if len(ids) > 0 {
		ms, err = s.store.Machines(r.Context(), m.UUID, ids)
		if err != nil {
			return err
		}
	}
	st := Status{
		Model:       m.Name,
		Provider:    m.Provider,
		HarvestMode: string(m.Settings.HarvestMode),
		Machines:    make(map[string]MachineStatus, len(ms)),
		Zones:       map[string]ZoneStatus{},
	}
	rt := s.runtimeStatus(r.Context(), m.UUID)
	st.ProvisionerError, st.HarvestBreaker, st.Remediation, st.Replacing = rt.ProvisionerError, rt.HarvestBreaker, rt.Remediation, rt.Replacing
	counts := map[string]int{} // of the machines asked for
	for _, mc := range ms {
		st.Machines[mc.ID] = machineStatus(mc)
		if mc.Instance != nil {
			counts[instanceZone(mc.Instance)]++
		}
	}
	zones, err := s.zones(r.Context(), m.UUID)
	if err != nil {
		// Status stays useful while the provider is unreachable. Filtered
		// requests come from open dashboards, up to twice a second: they
		// log quietly.
		lvl := slog.LevelWarn
		if ids != nil {
			lvl = slog.LevelDebug
		}
		s.logger.Log(r.Context(), lvl, "list zones for status", "model", m.Name, "err", err)
	}
	for _, z := range zones {
		if ids != nil {
			z.Machines = counts[z.Name]
		}
		st.Zones[z.Name] = ZoneStatus{Available: z.Available, Machines: z.Machines}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) handleZones(w http.ResponseWriter, r *http.Request) error {
	m, err := s.model(r)
	if err != nil {
		return err
	}
	zones, err := s.zones(r.Context(), m.UUID)
	if err != nil {
		if _, ok := asError(err); !ok {
			err = &muster.Error{Code: muster.EUnavailable, Message: fmt.Sprintf("list zones of model %q: %v", m.Name, err), Err: err}
		}
		return err
	}
	if zones == nil {
		zones = []ZoneInfo{}
	}
	writeJSON(w, http.StatusOK, zones)
	return nil
}
