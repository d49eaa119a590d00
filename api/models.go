package api

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/musterhq/muster"
)

func (s *Server) modelInfo(m muster.Model) ModelInfo {
	cfg := m.Config
	if cfg == nil {
		cfg = map[string]string{}
	}
	return ModelInfo{
		UUID:           m.UUID,
		ControllerUUID: s.cfg.ControllerUUID,
		Name:           m.Name,
		Provider:       m.Provider,
		Config:         cfg,
		Settings:       m.Settings.Map(),
		Created:        m.Created,
	}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) error {
	ms, err := s.store.Models(r.Context())
	if err != nil {
		return err
	}
	out := make([]ModelInfo, 0, len(ms))
	for _, m := range ms {
		out = append(out, s.modelInfo(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) error {
	m, err := s.model(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.modelInfo(m))
	return nil
}

// newModel builds the model a request asks for: settings keys go into
// Settings, the rest into the provider's Config.
func newModel(req AddModelRequest) (muster.Model, error) {
	if err := muster.CheckName(req.Name); err != nil {
		return muster.Model{}, muster.Errorf(muster.EInvalid, "bad model name %q: %s", req.Name, muster.ErrorMessage(err))
	}
	if req.Provider == "" {
		return muster.Model{}, muster.Errorf(muster.EInvalid, "no provider given")
	}
	m := muster.Model{
		Name:     req.Name,
		Provider: req.Provider,
		Config:   map[string]string{},
		Settings: muster.DefaultSettings(),
	}
	keys := make([]string, 0, len(req.Config))
	for k := range req.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := req.Config[k]
		if _, ok := muster.LookupSettingKey(k); ok {
			if err := m.Settings.Set(k, v); err != nil {
				return muster.Model{}, err
			}
			continue
		}
		if k == "" || strings.ContainsAny(k, "= \t\n") {
			return muster.Model{}, muster.Errorf(muster.EInvalid, "bad config key %q", k)
		}
		m.Config[k] = v
	}
	return m, nil
}

func (s *Server) handleAddModel(w http.ResponseWriter, r *http.Request) error {
	var req AddModelRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	m, err := newModel(req)
	if err != nil {
		return err
	}
	if s.cfg.Runtime != nil {
		if err := s.cfg.Runtime.ValidateModel(m); err != nil {
			if _, ok := asError(err); !ok {
				err = &muster.Error{Code: muster.EInvalid, Message: fmt.Sprintf("bad model %q: %v", m.Name, err), Err: err}
			}
			return err
		}
	}
	m, err = s.store.CreateModel(r.Context(), m)
	if err != nil {
		return err
	}
	s.appendEvents(r.Context(), []muster.Event{{
		ModelUUID: m.UUID, Actor: principalOf(r.Context()).actor(), Kind: "add-model",
		Message: fmt.Sprintf("model %s added with provider %s", m.Name, m.Provider),
	}})
	writeJSON(w, http.StatusCreated, s.modelInfo(m))
	return nil
}

func (s *Server) handleRemoveModel(w http.ResponseWriter, r *http.Request) error {
	m, err := s.model(r)
	if err != nil {
		return err
	}
	ms, err := s.store.Machines(r.Context(), m.UUID, nil)
	if err != nil {
		return err
	}
	if len(ms) > 0 {
		return muster.Errorf(muster.EConflict, "model %q still has %d machines; remove them first", m.Name, len(ms))
	}
	if err := s.store.RemoveModel(r.Context(), m.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleModelConfig(w http.ResponseWriter, r *http.Request) error {
	m, err := s.model(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m.Settings.Map())
	return nil
}

func (s *Server) handleSetModelConfig(w http.ResponseWriter, r *http.Request) error {
	var req ModelConfigRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	if len(req.Set) == 0 {
		return muster.Errorf(muster.EInvalid, "no settings given")
	}
	keys := make([]string, 0, len(req.Set))
	for k := range req.Set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	st := m.Settings
	var changes []string
	for _, k := range keys {
		if err := st.Set(k, req.Set[k]); err != nil {
			return err
		}
		v, _ := st.Get(k)
		changes = append(changes, k+"="+v)
	}
	if err := s.store.UpdateModelSettings(r.Context(), m.UUID, st); err != nil {
		return err
	}
	s.appendEvents(r.Context(), []muster.Event{{
		ModelUUID: m.UUID, Actor: principalOf(r.Context()).actor(), Kind: "model-config",
		Message: "set " + strings.Join(changes, " "),
	}})
	writeJSON(w, http.StatusOK, st.Map())
	return nil
}

func asError(err error) (*muster.Error, bool) {
	var me *muster.Error
	ok := errors.As(err, &me)
	return me, ok
}
