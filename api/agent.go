package api

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
	"golang.org/x/time/rate"
)

// MissedHeartbeats is how many heartbeat periods may pass in silence
// before a machine is set down.
const MissedHeartbeats = 3

// periodRefresh is how often a session re-reads its model's heartbeat
// period.
const periodRefresh = time.Minute

// agentSession is what a logged-in agent's token stands for. Sessions are
// kept in memory: after a controller restart agents log in again.
type agentSession struct {
	modelUUID string
	modelName string
	machineID string
	nonce     string

	mu       sync.Mutex
	period   time.Duration
	periodAt time.Time

	// writeMu serialises the agent's writes, so each becomes at most one
	// event (S6); writes is their budget.
	writeMu sync.Mutex
	writes  *rate.Limiter
}

// Agent write limits (S6): an agent reports its status, hardware and
// addresses a few times in its life, so a bucket of agentWriteBurst
// refilled at agentWriteRate a second never slows an honest agent and
// keeps a stolen credential from filling the store.
const (
	agentWriteBurst = 10
	agentWriteRate  = 0.2
)

// Bounds of agent-reported fields (S6).
const (
	maxStatusMessage = 1024
	maxAddresses     = 64
	maxHardwareName  = 64
)

// checkAgentUpdate refuses agent-reported fields that are too long or
// that do not parse: messages over 1 KiB, addresses that are not IP
// addresses, hardware names with anything but letters, digits and -_.
func checkAgentUpdate(req AgentUpdate) error {
	if req.StatusMessage != nil && len(*req.StatusMessage) > maxStatusMessage {
		return muster.Errorf(muster.EInvalid, "bad status message: %d bytes, want at most %d", len(*req.StatusMessage), maxStatusMessage)
	}
	if req.Addresses != nil {
		if n := len(*req.Addresses); n > maxAddresses {
			return muster.Errorf(muster.EInvalid, "bad addresses: %d, want at most %d", n, maxAddresses)
		}
		for _, a := range *req.Addresses {
			if _, err := netip.ParseAddr(a); err != nil {
				return muster.Errorf(muster.EInvalid, "bad address %q: want an IP address", muster.Printable(trim(a)))
			}
		}
	}
	if hw := req.Hardware; hw != nil {
		for _, f := range []struct{ name, value string }{{"arch", hw.Arch}, {"availability-zone", hw.AvailabilityZone}} {
			if !hardwareName(f.value) {
				return muster.Errorf(muster.EInvalid, "bad hardware %s %q: want at most %d letters, digits, '-', '_' or '.'", f.name, muster.Printable(trim(f.value)), maxHardwareName)
			}
		}
	}
	return nil
}

// agentUpdate checks an agent's update and turns it into the store's,
// without the life (which needs the machine) and the machine's id.
func agentUpdate(req AgentUpdate) (muster.MachineUpdate, error) {
	if err := checkAgentUpdate(req); err != nil {
		return muster.MachineUpdate{}, err
	}
	u := muster.MachineUpdate{StatusMessage: req.StatusMessage, Hardware: req.Hardware, Addresses: req.Addresses}
	if req.Status != nil {
		switch st := muster.MachineStatus(*req.Status); st {
		case muster.StatusStarted, muster.StatusStopped, muster.StatusError:
			u.Status = &st
		default:
			return muster.MachineUpdate{}, muster.Errorf(muster.EInvalid, "bad status %q: an agent may set started, stopped or error", *req.Status)
		}
	}
	if req.Addresses != nil && *req.Addresses == nil {
		u.Addresses = muster.Ptr([]string{})
	}
	return u, nil
}

// agentChange completes an agent's update u of machine mc (its id; the
// hardware it measured over what the provider recorded: zero fields keep
// the recorded values) and returns the events of what u changes, to be
// written with it.
func agentChange(model string, u muster.MachineUpdate, mc muster.Machine) (muster.MachineUpdate, []muster.Event) {
	if u.Hardware != nil && mc.Instance != nil {
		u.Hardware = muster.Ptr(mergeHardware(mc.Instance.Hardware, *u.Hardware))
	}
	u.ID = mc.ID
	var es []muster.Event
	if u.Life != nil && mc.Life != muster.LifeDead {
		es = append(es, muster.Event{ModelUUID: model, MachineID: mc.ID, Actor: "agent/" + mc.ID, Kind: "dead", Message: fmt.Sprintf("machine %s is dead", mc.ID)})
	}
	if u.Status != nil && *u.Status != mc.Status {
		msg := fmt.Sprintf("machine %s %s", mc.ID, *u.Status)
		if u.StatusMessage != nil && *u.StatusMessage != "" {
			msg += ": " + *u.StatusMessage
		}
		es = append(es, muster.Event{ModelUUID: model, MachineID: mc.ID, Actor: "agent/" + mc.ID, Kind: string(*u.Status), Message: msg})
	}
	return u, es
}

func hardwareName(s string) bool {
	if len(s) > maxHardwareName {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// trim shortens s for an error message.
func trim(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

type sessionKey struct{ model, machine string }

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	s.agentReqs.Add(1)
	if err := s.login(w, r); err != nil {
		s.fail(w, r, err)
	}
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	if err := s.authFail.admit(r); err != nil {
		return err
	}
	var req LoginRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	refused := func(reason string) error {
		s.authFail.fail(r, reason)
		return muster.Errorf(muster.EUnauthorized, "invalid machine credentials")
	}
	ctx := r.Context()
	if req.Model == "" || req.Machine == "" || req.Password == "" {
		return refused("agent login without model, machine or password")
	}
	m, err := s.models.get(ctx, s.store, s.clock, req.Model)
	if muster.IsCode(err, muster.ENotFound) {
		return refused("agent login to an unknown model")
	} else if err != nil {
		return err
	}
	mc, err := s.store.Machine(ctx, m.UUID, req.Machine)
	if muster.IsCode(err, muster.ENotFound) {
		return refused("agent login as an unknown machine")
	} else if err != nil {
		return err
	}
	if !auth.TokenMatches(req.Password, mc.PasswordHash) {
		return refused("agent login with a wrong password")
	}
	if req.Nonce == "" || req.Nonce != mc.Nonce || !mc.HasInstance() || mc.Life == muster.LifeDead {
		return muster.Errorf(muster.ENotProvisioned, "machine %s is not provisioned with this nonce", mc.ID)
	}
	res := s.openSession(m, mc, false)
	login := loginEvent(m.UUID, mc.ID)
	if err := s.agentWrites.write(ctx, m.UUID, nil, login); err != nil {
		s.logger.Error("append events", "model", m.UUID, "kind", login.Kind, "err", err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// openSession starts a session for the agent of machine mc, which has
// proved who it is (login, or enrolment), and returns what the agent
// needs; the caller writes the loginEvent.
//
// seenWritten says the store has the machine seen already (the enrolment
// writes it): then the heartbeat monitor notes the beat without writing it.
func (s *Server) openSession(m muster.Model, mc muster.Machine, seenWritten bool) LoginResult {
	tok, hash := s.newSessionToken()
	sess := &agentSession{
		modelUUID: m.UUID, modelName: m.Name, machineID: mc.ID, nonce: mc.Nonce,
		period: m.Settings.AgentHeartbeat, periodAt: s.clock.Now(),
		writes: rate.NewLimiter(agentWriteRate, agentWriteBurst),
	}
	s.hb.addSession(hash, sess)
	s.hb.note(sess, !seenWritten)
	s.hb.setLife(sess.modelUUID, mc.ID, mc.Life)
	return LoginResult{Token: tok, ModelUUID: m.UUID, Heartbeat: sess.period.String()}
}

// loginEvent is the event of a session opened for machine id's agent.
func loginEvent(model, id string) muster.Event {
	return muster.Event{ModelUUID: model, MachineID: id, Actor: "agent/" + id, Kind: "login",
		Message: fmt.Sprintf("agent of machine %s logged in", id)}
}

// agentMachine checks that the request names the agent's own machine and
// returns the session and the machine.
func (s *Server) agentMachine(r *http.Request) (*agentSession, muster.Machine, error) {
	sess := principalOf(r.Context()).agent
	model, id := r.PathValue("model"), r.PathValue("id")
	if (model != sess.modelUUID && model != sess.modelName) || id != sess.machineID {
		return nil, muster.Machine{}, muster.Errorf(muster.EForbidden, "agent of machine %s may not act on machine %s of model %s", sess.machineID, id, model)
	}
	mc, err := s.store.Machine(r.Context(), sess.modelUUID, sess.machineID)
	if err != nil {
		return nil, muster.Machine{}, err
	}
	if mc.Nonce != sess.nonce {
		return nil, muster.Machine{}, muster.Errorf(muster.ENotProvisioned, "machine %s was provisioned again; log in again", mc.ID)
	}
	return sess, mc, nil
}

// mergeHardware overlays what an agent measured on what was recorded: a
// zero field keeps the recorded value.
func mergeHardware(recorded, seen muster.Hardware) muster.Hardware {
	hw := recorded
	if seen.Arch != "" {
		hw.Arch = seen.Arch
	}
	if seen.Cores != 0 {
		hw.Cores = seen.Cores
	}
	if seen.Mem != 0 {
		hw.Mem = seen.Mem
	}
	if seen.RootDisk != 0 {
		hw.RootDisk = seen.RootDisk
	}
	if seen.AvailabilityZone != "" {
		hw.AvailabilityZone = seen.AvailabilityZone
	}
	return hw
}

func (s *Server) checkOwn(r *http.Request) (*agentSession, error) {
	sess := principalOf(r.Context()).agent
	model, id := r.PathValue("model"), r.PathValue("id")
	if (model != sess.modelUUID && model != sess.modelName) || id != sess.machineID {
		return nil, muster.Errorf(muster.EForbidden, "agent of machine %s may not act on machine %s of model %s", sess.machineID, id, model)
	}
	return sess, nil
}

func agentMachineInfo(mc muster.Machine, period time.Duration) AgentMachine {
	am := AgentMachine{
		ID: mc.ID, Life: string(mc.Life), Status: string(mc.Status), StatusMessage: mc.StatusMessage,
		InstanceID: mc.InstanceID(), InstanceStatus: string(mc.InstanceStatus), Addresses: []string{},
		Heartbeat: period.String(),
	}
	if mc.Instance != nil {
		am.Hardware = mc.Instance.Hardware
		if mc.Instance.Addresses != nil {
			am.Addresses = mc.Instance.Addresses
		}
	}
	return am
}

func (s *Server) handleAgentMachine(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.checkOwn(r); err != nil {
		return err
	}
	sess, mc, err := s.agentMachine(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, agentMachineInfo(mc, s.sessionPeriod(r.Context(), sess)))
	return nil
}

func (s *Server) handleAgentSetMachine(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.checkOwn(r); err != nil {
		return err
	}
	var req AgentUpdate
	if err := decode(r, &req); err != nil {
		return err
	}
	u, err := agentUpdate(req)
	if err != nil {
		return err
	}
	own := principalOf(r.Context()).agent
	own.writeMu.Lock()
	defer own.writeMu.Unlock()
	if !own.writes.AllowN(s.clock.Now(), 1) {
		return muster.Errorf(muster.EUnavailable, "agent of machine %s writes too often: slow down", own.machineID)
	}
	sess, mc, err := s.agentMachine(r)
	if err != nil {
		return err
	}
	if req.Life != nil {
		if *req.Life != string(muster.LifeDead) {
			return muster.Errorf(muster.EInvalid, "bad life %q: an agent may only make its machine dead", *req.Life)
		}
		if mc.Life == muster.LifeAlive {
			return muster.Errorf(muster.EConflict, "machine %s is alive: an agent may make it dead only once it is dying", mc.ID)
		}
		u.Life = muster.Ptr(muster.LifeDead)
	}
	ctx := r.Context()
	u, es := agentChange(sess.modelUUID, u, mc)
	if err := s.agentWrites.write(ctx, sess.modelUUID, &u, es...); err != nil {
		return err
	}
	s.hb.beat(sess)
	mc, err = s.store.Machine(ctx, sess.modelUUID, mc.ID)
	if err != nil {
		return err
	}
	s.hb.setLife(sess.modelUUID, mc.ID, mc.Life)
	writeJSON(w, http.StatusOK, agentMachineInfo(mc, s.sessionPeriod(ctx, sess)))
	return nil
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.checkOwn(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if s.hb.beat(sess) {
		// The machine was set down: bring it back if it still is.
		if err := s.hb.markUp(ctx, sess); err != nil {
			return err
		}
	}
	// The life comes from memory: the flusher reads it back with every
	// batch of heartbeats it writes, and this server's own life changes
	// (remove-machine, apply, the agent's own writes) set it at once.
	writeJSON(w, http.StatusOK, HeartbeatResult{Heartbeat: s.sessionPeriod(ctx, sess).String(), Life: string(s.hb.life(sess))})
	return nil
}

// sessionPeriod returns the model's heartbeat period, re-read from the
// store at most every periodRefresh.
func (s *Server) sessionPeriod(ctx context.Context, sess *agentSession) time.Duration {
	now := s.clock.Now()
	sess.mu.Lock()
	p, at := sess.period, sess.periodAt
	sess.mu.Unlock()
	if now.Sub(at) < periodRefresh {
		return p
	}
	m, err := s.store.Model(ctx, sess.modelUUID)
	if err != nil {
		return p
	}
	sess.mu.Lock()
	sess.period, sess.periodAt = m.Settings.AgentHeartbeat, now
	sess.mu.Unlock()
	return m.Settings.AgentHeartbeat
}

// HeartbeatFlushEvery is how often the heartbeats received since the last
// flush are written to the store: one transaction per model per interval
// (SPEC §4), whatever the number of agents.
const HeartbeatFlushEvery = time.Second

// heartbeats tracks when each machine's agent last showed up, in memory,
// and sets machines down that stay silent (SPEC §4). Heartbeats are
// written to the store in batches (last seen), which also read back the
// machines' lives that heartbeats answer with.
type heartbeats struct {
	s *Server

	mu        sync.Mutex
	beats     map[sessionKey]*beat
	byMachine map[sessionKey]string // → token hash of the newest session
	dirty     map[sessionKey]bool   // beaten since the last flush
	// armed is when run wakes next by itself (zero: never); a beat whose
	// deadline comes sooner kicks it, others need not (each wake scans
	// every beat).
	armed time.Time
	kick  chan struct{}
	// adopting holds the models this controller began to monitor since
	// run last looked (MonitorModel): their started machines are adopted.
	adopting map[string]bool
}

type beat struct {
	last    time.Time
	period  time.Duration
	down    bool
	life    muster.Life // as last read or set; "" until known
	flushed time.Time   // the last seen this server last wrote for it
}

func newHeartbeats(s *Server) *heartbeats {
	return &heartbeats{s: s, beats: map[sessionKey]*beat{}, byMachine: map[sessionKey]string{},
		dirty: map[sessionKey]bool{}, kick: make(chan struct{}, 1), adopting: map[string]bool{}}
}

// MonitorModel tells the server that this controller now runs the
// model's provisioner (Config.Runtime's Monitors is true for it), at its
// start or after it took the model over from another controller: the
// model's started machines that the monitor does not track yet count as
// having just heartbeaten, and are set down if their agents stay silent.
// A server without a Runtime adopts every model's at Start instead.
func (s *Server) MonitorModel(modelUUID string) {
	h := s.hb
	h.mu.Lock()
	h.adopting[modelUUID] = true
	h.mu.Unlock()
	h.wake()
}

// wake makes run look at the beats again at once.
func (h *heartbeats) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// life returns the machine's life as the monitor knows it, alive when it
// does not know it.
func (h *heartbeats) life(sess *agentSession) muster.Life {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.beats[sessionKey{sess.modelUUID, sess.machineID}]; b != nil && b.life != "" {
		return b.life
	}
	return muster.LifeAlive
}

// setLife records a machine's life that this server read or wrote.
func (h *heartbeats) setLife(model, id string, life muster.Life) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.beats[sessionKey{model, id}]; b != nil {
		b.life = life
	}
}

// setLives records the lives that updates us of a model set.
func (h *heartbeats) setLives(model string, us []muster.MachineUpdate) {
	for _, u := range us {
		if u.Life != nil {
			h.setLife(model, u.ID, *u.Life)
		}
	}
}

// addSession registers a login, revoking the machine's earlier token.
func (h *heartbeats) addSession(hash string, sess *agentSession) {
	k := sessionKey{sess.modelUUID, sess.machineID}
	// Both steps under the lock: two logins racing must not leave the
	// loser's token stored after the winner revoked it (S6).
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.byMachine[k]; ok {
		h.s.sessions.Delete(old)
	}
	h.byMachine[k] = hash
	h.s.sessions.Store(hash, sess)
}

// beat records a sign of life, to be written with the next flush; it
// reports whether the machine had been set down.
func (h *heartbeats) beat(sess *agentSession) (wasDown bool) {
	return h.note(sess, true)
}

// note records a sign of life, to be written with the next flush when
// write is set (else the store has it already); it reports whether the
// machine had been set down.
func (h *heartbeats) note(sess *agentSession, write bool) (wasDown bool) {
	now := h.s.clock.Now()
	sess.mu.Lock()
	period := sess.period
	sess.mu.Unlock()
	k := sessionKey{sess.modelUUID, sess.machineID}
	h.mu.Lock()
	b, ok := h.beats[k]
	if !ok {
		b = &beat{}
		h.beats[k] = b
	}
	wasDown = b.down
	b.last, b.period, b.down = now, period, false
	firstDirty := write && len(h.dirty) == 0
	if write {
		h.dirty[k] = true
	}
	sooner := period > 0 && (h.armed.IsZero() || now.Add(MissedHeartbeats*period).Before(h.armed))
	h.mu.Unlock()
	if sooner || firstDirty {
		h.wake()
	}
	return wasDown
}

// markUp sets a down machine started again.
func (h *heartbeats) markUp(ctx context.Context, sess *agentSession) error {
	s := h.s
	mc, err := s.store.Machine(ctx, sess.modelUUID, sess.machineID)
	if err != nil {
		return err
	}
	if mc.Status != muster.StatusDown {
		return nil
	}
	u := muster.MachineUpdate{ID: mc.ID, Status: muster.Ptr(muster.StatusStarted), StatusMessage: muster.Ptr("")}
	up := muster.Event{ModelUUID: sess.modelUUID, MachineID: mc.ID, Actor: "agent/" + mc.ID, Kind: "up",
		Message: fmt.Sprintf("machine %s heartbeats resumed", mc.ID)}
	// With the other agents' writes: after an outage thousands of
	// machines come back up at once.
	if err := s.agentWrites.write(ctx, sess.modelUUID, &u, up); err != nil {
		return err
	}
	s.logger.Info("machine up again", "model", sess.modelName, "machine", mc.ID)
	return nil
}

// run watches deadlines and flushes heartbeats every HeartbeatFlushEvery
// until ctx ends. Machines already started when it begins (with a
// Runtime: when their model is announced) count as having just
// heartbeaten, so a controller restart sets down those whose agents never
// come back.
func (h *heartbeats) run(ctx context.Context) {
	if h.s.cfg.Runtime == nil {
		// Every model is this server's; with a Runtime, those it runs
		// are announced (MonitorModel) as they start.
		h.adoptStarted(ctx, nil)
	}
	var flushAt time.Time // the next flush is due then
	for {
		h.mu.Lock()
		adopting := h.adopting
		h.adopting = map[string]bool{}
		h.mu.Unlock()
		if len(adopting) > 0 {
			h.adoptStarted(ctx, adopting)
		}
		now := h.s.clock.Now()
		if !now.Before(flushAt) {
			if h.flush(ctx, now) {
				flushAt = now.Add(HeartbeatFlushEvery)
			} else {
				flushAt = time.Time{} // nothing to flush: at the next beat
			}
		}
		var due []sessionKey
		var next time.Time
		h.mu.Lock()
		if !flushAt.IsZero() || len(h.dirty) > 0 {
			if flushAt.IsZero() {
				flushAt = now.Add(HeartbeatFlushEvery)
			}
			next = flushAt
		}
		for k, b := range h.beats {
			if b.down || b.period <= 0 {
				continue
			}
			dl := b.last.Add(MissedHeartbeats * b.period)
			if !now.Before(dl) {
				b.down = true
				due = append(due, k)
			} else if next.IsZero() || dl.Before(next) {
				next = dl
			}
		}
		h.armed = next
		h.mu.Unlock()
		if len(due) > 0 {
			h.markDown(ctx, due)
		}
		var timerC <-chan time.Time
		var t muster.Timer
		if !next.IsZero() {
			// From the clock's time now, not the loop's: the loop may
			// have taken a while, and a timer set from a stale time
			// would fire late by as much.
			t = h.s.clock.NewTimer(next.Sub(h.s.clock.Now()))
			timerC = t.C()
		}
		select {
		case <-ctx.Done():
			if t != nil {
				t.Stop()
			}
			return
		case <-timerC:
		case <-h.kick:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// adoptStarted gives the started machines the monitor does not track yet
// a heartbeat now: every model's, or with only those of the models in it.
func (h *heartbeats) adoptStarted(ctx context.Context, only map[string]bool) {
	s := h.s
	models, err := s.store.Models(ctx)
	if err != nil {
		s.logger.Warn("heartbeat monitor: list models", "err", err)
		return
	}
	now := s.clock.Now()
	for _, m := range models {
		if only != nil && !only[m.UUID] {
			continue
		}
		ms, err := s.store.Machines(ctx, m.UUID, nil)
		if err != nil {
			s.logger.Warn("heartbeat monitor: list machines", "model", m.Name, "err", err)
			continue
		}
		h.mu.Lock()
		for _, mc := range ms {
			k := sessionKey{m.UUID, mc.ID}
			if _, ok := h.beats[k]; !ok && mc.Status == muster.StatusStarted && mc.Life != muster.LifeDead {
				h.beats[k] = &beat{last: now, period: m.Settings.AgentHeartbeat}
			}
		}
		h.mu.Unlock()
	}
}

// heardElsewhere reports whether machine mc's agent heartbeated in time to
// another controller sharing the store (which wrote it as the machine's
// last seen in its flush, newer than the monitor's last beat and than
// what this server's own flushes wrote): the beat moves to then, and run
// is kicked to watch its new deadline.
func (h *heartbeats) heardElsewhere(model string, mc muster.Machine, now time.Time) bool {
	h.mu.Lock()
	b := h.beats[sessionKey{model, mc.ID}]
	ok := b != nil && mc.LastSeen.After(b.last) && mc.LastSeen.After(b.flushed) && now.Before(mc.LastSeen.Add(MissedHeartbeats*b.period))
	if ok {
		b.last, b.down = mc.LastSeen, false
	}
	h.mu.Unlock()
	if ok {
		h.wake()
	}
	return ok
}

// markDown sets the machines down whose status is still started.
func (h *heartbeats) markDown(ctx context.Context, keys []sessionKey) {
	s := h.s
	byModel := map[string][]string{}
	for _, k := range keys {
		byModel[k.model] = append(byModel[k.model], k.machine)
	}
	for model, ids := range byModel {
		if s.cfg.Runtime != nil && !s.cfg.Runtime.Monitors(model) {
			// Another controller watches this model's agents: forget
			// them here rather than set them down.
			h.mu.Lock()
			for _, id := range ids {
				delete(h.beats, sessionKey{model, id})
			}
			h.mu.Unlock()
			continue
		}
		ms, err := s.store.Machines(ctx, model, ids)
		if err != nil {
			s.logger.Warn("heartbeat monitor: read machines", "model", model, "err", err)
			continue
		}
		found := map[string]bool{}
		var us []muster.MachineUpdate
		var es []muster.Event
		now := s.clock.Now()
		for _, mc := range ms {
			found[mc.ID] = true
			if mc.Status != muster.StatusStarted || h.heardElsewhere(model, mc, now) {
				continue
			}
			msg := fmt.Sprintf("agent missed %d heartbeats", MissedHeartbeats)
			us = append(us, muster.MachineUpdate{ID: mc.ID, Status: muster.Ptr(muster.StatusDown), StatusMessage: muster.Ptr(msg)})
			es = append(es, muster.Event{ModelUUID: model, MachineID: mc.ID, Actor: "controller", Kind: "down",
				Message: fmt.Sprintf("machine %s down: %s", mc.ID, msg)})
		}
		h.forgetMissing(model, ids, func(id string) bool { return found[id] })
		if len(us) == 0 {
			continue
		}
		// Each change with its event, in one transaction: a heartbeat that
		// brings the machine up again cannot get its event in before this.
		if err := s.store.UpdateMachines(ctx, model, us, es...); err != nil {
			// One machine removed meanwhile fails the batch: go one by one.
			for i, u := range us {
				if err := s.store.UpdateMachines(ctx, model, []muster.MachineUpdate{u}, es[i]); err != nil && ctx.Err() == nil {
					s.logger.Warn("heartbeat monitor: set machine down", "model", model, "machine", u.ID, "err", err)
				}
			}
		}
		for _, e := range es {
			s.logger.Info("machine down", "model", model, "machine", e.MachineID)
		}
	}
}

// forgetMissing forgets the machines of ids that are not found (removed
// meanwhile) and revokes their agents' tokens.
func (h *heartbeats) forgetMissing(model string, ids []string, found func(id string) bool) {
	var revoked []string
	h.mu.Lock()
	for _, id := range ids {
		if k := (sessionKey{model, id}); !found(id) {
			delete(h.beats, k)
			delete(h.dirty, k)
			if hash, ok := h.byMachine[k]; ok {
				revoked = append(revoked, hash)
				delete(h.byMachine, k)
			}
		}
	}
	h.mu.Unlock()
	for _, hash := range revoked {
		h.s.sessions.Delete(hash)
	}
}

// flush writes the heartbeats received since the last flush, as last
// seen at now, in one transaction per model, and takes the machines'
// lives from it. It reports whether there was anything to write. A
// model whose write fails is tried again at the next flush.
func (h *heartbeats) flush(ctx context.Context, now time.Time) bool {
	h.mu.Lock()
	if len(h.dirty) == 0 {
		h.mu.Unlock()
		return false
	}
	byModel := map[string][]string{}
	for k := range h.dirty {
		byModel[k.model] = append(byModel[k.model], k.machine)
		if b := h.beats[k]; b != nil {
			b.flushed = now
		}
	}
	clear(h.dirty)
	h.mu.Unlock()
	for model, ids := range byModel {
		lives, err := h.s.store.RecordHeartbeats(ctx, model, ids, now)
		if err != nil {
			if ctx.Err() != nil {
				return true
			}
			h.s.logger.Warn("heartbeat monitor: write heartbeats", "model", model, "machines", len(ids), "err", err)
			if !muster.IsCode(err, muster.ENotFound) { // a removed model's heartbeats are dropped
				h.mu.Lock()
				for _, id := range ids {
					h.dirty[sessionKey{model, id}] = true
				}
				h.mu.Unlock()
			}
			continue
		}
		h.mu.Lock()
		for id, life := range lives {
			if b := h.beats[sessionKey{model, id}]; b != nil {
				b.life = life
			}
		}
		h.mu.Unlock()
		h.forgetMissing(model, ids, func(id string) bool { _, ok := lives[id]; return ok })
	}
	h.s.hbFlushes.Add(1)
	return true
}
