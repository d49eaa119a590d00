package muster

import (
	"slices"
	"sort"
	"strings"
)

// Group settings: fleet files (and `model-config group.G.KEY=VALUE`)
// override the health settings for one group (SPEC R1–R3). They are kept
// in Settings as one canonical string, so that Settings stays a
// comparable value that copies without sharing.

// GroupSettingKeys are the settings a group may override.
var GroupSettingKeys = []string{"registration-timeout", "unhealthy-after", "max-unhealthy", "max-in-flight"}

const groupPrefix = "group."

// GroupSettingKey is the model-config key of a group's setting.
func GroupSettingKey(group, key string) string { return groupPrefix + group + "." + key }

// splitGroupKey parses "group.G.KEY"; ok is false for any other key.
func splitGroupKey(key string) (group, name string, ok bool) {
	rest, found := strings.CutPrefix(key, groupPrefix)
	i := strings.LastIndex(rest, ".")
	if !found || i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// groupEntries returns the overrides as (group, key) → value.
func (s Settings) groupEntries() map[[2]string]string {
	out := map[[2]string]string{}
	for _, line := range strings.Split(s.groups, "\n") {
		g, kv, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		out[[2]string{g, k}] = v
	}
	return out
}

// setGroup sets (or with value "" removes) a group's override.
func (s *Settings) setGroup(group, name, value string) error {
	if err := CheckName(group); err != nil {
		return Errorf(EInvalid, "bad group in setting %q: %s", GroupSettingKey(group, name), ErrorMessage(err))
	}
	ok := false
	for _, k := range GroupSettingKeys {
		ok = ok || k == name
	}
	if !ok {
		return Errorf(EInvalid, "unknown group setting %q (known: %s)", name, strings.Join(GroupSettingKeys, ", "))
	}
	es := s.groupEntries()
	if value == "" {
		delete(es, [2]string{group, name})
	} else {
		var tmp Settings
		if err := tmp.Set(name, value); err != nil {
			return Errorf(EInvalid, "group %s: %s", group, ErrorMessage(err))
		}
		v, _ := tmp.Get(name)
		es[[2]string{group, name}] = v
	}
	lines := make([]string, 0, len(es))
	for gk, v := range es {
		lines = append(lines, gk[0]+" "+gk[1]+"="+v)
	}
	sort.Strings(lines)
	s.groups = strings.Join(lines, "\n")
	return nil
}

// GroupSettings returns the group overrides keyed as model-config keys.
func (s Settings) GroupSettings() map[string]string {
	out := map[string]string{}
	for gk, v := range s.groupEntries() {
		out[GroupSettingKey(gk[0], gk[1])] = v
	}
	return out
}

// ForGroup returns the settings in force for a group's machines: s with
// the group's overrides.
func (s Settings) ForGroup(group string) Settings {
	if s.groups == "" || group == "" {
		return s
	}
	out := s
	for gk, v := range s.groupEntries() {
		if gk[0] == group {
			_ = out.Set(gk[1], v) // checked when set
		}
	}
	return out
}

// KnownSetting reports whether this muster knows key: a model-config key
// or a group override of one of GroupSettingKeys. A store skips keys a
// newer muster wrote.
func KnownSetting(key string) bool {
	if _, name, ok := splitGroupKey(key); ok {
		return slices.Contains(GroupSettingKeys, name)
	}
	_, ok := LookupSettingKey(key)
	return ok
}
