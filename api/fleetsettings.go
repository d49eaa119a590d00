package api

import (
	"context"

	"github.com/musterhq/muster"
)

// healthSettings are a fleet group's health settings by key (R1–R3).
func (g FleetGroup) healthSettings() map[string]string {
	return map[string]string{
		"registration-timeout": g.RegistrationTimeout, "unhealthy-after": g.UnhealthyAfter,
		"max-unhealthy": g.MaxUnhealthy, "max-in-flight": g.MaxInFlight,
	}
}

// withSettings returns s with the group's health overrides as the fleet
// file declares them: a setting the group leaves out falls back to the
// model's. EInvalid names the setting at fault.
func (g FleetGroup) withSettings(s muster.Settings) (muster.Settings, error) {
	for _, k := range muster.GroupSettingKeys {
		v := g.healthSettings()[k]
		if v != "" {
			var tmp muster.Settings
			if err := tmp.Set(k, v); err != nil {
				return s, err
			}
		}
		if err := s.Set(muster.GroupSettingKey(g.Name, k), v); err != nil {
			return s, err
		}
	}
	return s, nil
}

// applyGroupSettings checks the groups' health settings and, unless
// dryRun, records them in the model's settings when they changed.
func (s *Server) applyGroupSettings(ctx context.Context, m muster.Model, groups []FleetGroup, dryRun bool) error {
	set := m.Settings
	for _, g := range groups {
		var err error
		if set, err = g.withSettings(set); err != nil {
			return &muster.Error{Code: muster.EInvalid, Message: "group " + g.Name + ": " + muster.ErrorMessage(err), Err: err}
		}
	}
	if dryRun || set == m.Settings {
		return nil
	}
	return s.store.UpdateModelSettings(ctx, m.UUID, set)
}
