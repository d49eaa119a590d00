package muster

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultModel is the model every controller starts with.
const DefaultModel = "default"

// Model is a namespace: one provider configuration, its settings and its
// machines.
type Model struct {
	UUID     string
	Name     string
	Provider string            // "sim", "docker", ...
	Config   map[string]string // provider configuration (endpoint, zones, ...)
	Settings Settings
	Created  time.Time
}

// HarvestMode says which instances the provisioner may stop.
type HarvestMode string

const (
	HarvestNone      HarvestMode = "none"
	HarvestDestroyed HarvestMode = "destroyed"
	HarvestUnknown   HarvestMode = "unknown"
	HarvestAll       HarvestMode = "all"
)

// ParseHarvestMode checks a harvest mode name.
func ParseHarvestMode(s string) (HarvestMode, error) {
	switch m := HarvestMode(s); m {
	case HarvestNone, HarvestDestroyed, HarvestUnknown, HarvestAll:
		return m, nil
	}
	return "", Errorf(EInvalid, "bad harvest-mode %q: want none, destroyed, unknown or all", s)
}

// Destroyed reports whether instances of dead machines may be stopped.
func (m HarvestMode) Destroyed() bool { return m == HarvestDestroyed || m == HarvestAll }

// Unknown reports whether instances that belong to no machine may be stopped.
func (m HarvestMode) Unknown() bool { return m == HarvestUnknown || m == HarvestAll }

// Settings are a model's tunables, set with `muster model-config`.
type Settings struct {
	HarvestMode         HarvestMode
	HarvestMinAge       time.Duration // unknown instances younger than this are never harvested (H6); default 60s
	NumProvisionWorkers int           // 1..256, default 16
	RetryCount          int           // retries after the first attempt, 0..100, default 10
	RetryDelay          time.Duration // between attempts, default 10s
	AutoRetryMax        time.Duration // cap of the automatic retry backoff (P16), default 30m
	ZoneFailureTTL      time.Duration // capacity memory (Z7), default 3m
	ResyncInterval      time.Duration // full reconcile pass (P19), default 5m
	AgentHeartbeat      time.Duration // default 10s
	RateLimitBurst      int           // client-side provider call bucket (E2), default 20
	RateLimitRate       float64       // calls per second, default 100
	SimAgents           bool          // run simulated agents on sim instances, default true
	BatchStarts         bool          // use batch starts when the provider offers them (E3), default true
	EventRetention      time.Duration // events and change-log entries older than this are trimmed (S10), default 168h
	RegistrationTimeout time.Duration // running without the agent ever started → replaced (R1); 0 = off, default 10m
	UnhealthyAfter      time.Duration // agent down this long → replaced (R2); 0 = off (default)
	MaxUnhealthy        Percent       // more of a group unhealthy than this → no R1/R2 replacement (R3), default 40%
	MaxInFlight         Percent       // replacements of a group at once, of its size, at least 1 (R3), default 10%
	HarvestQuarantine   time.Duration // unknown instances are stopped and kept this long before termination (R6); 0 = off
	HarvestMaxFraction  float64       // most of the live instances one pass may harvest as unknown (R7), default 0.5

	groups string // per-group overrides of health settings (groupsettings.go)
}

// Percent is a share in whole percent, 0..100, written "40%".
type Percent int

// Of returns p of n, rounded down.
func (p Percent) Of(n int) int { return n * int(p) / 100 }

// DefaultSettings returns the settings of a new model.
func DefaultSettings() Settings {
	s := Settings{}
	for _, k := range SettingKeys {
		if err := k.set(&s, k.Default); err != nil {
			panic("bad default for " + k.Name + ": " + err.Error())
		}
	}
	return s
}

// SettingKey describes one model-config key.
type SettingKey struct {
	Name    string
	Type    string // "duration", "int", "float", "bool", "harvest-mode", "percent"
	Default string
	Min     string // inclusive bounds, "" when unbounded
	Max     string
	Doc     string
	get     func(*Settings) any
}

// SettingKeys lists every model-config key in display order.
var SettingKeys = []SettingKey{
	{Name: "harvest-mode", Type: "harvest-mode", Default: "destroyed", Doc: "which instances may be stopped: none, destroyed, unknown, all",
		get: func(s *Settings) any { return &s.HarvestMode }},
	{Name: "harvest-min-age", Type: "duration", Default: "60s", Min: "0s", Max: "24h", Doc: "unknown instances younger than this are never harvested",
		get: func(s *Settings) any { return &s.HarvestMinAge }},
	{Name: "num-provision-workers", Type: "int", Default: "16", Min: "1", Max: "256", Doc: "parallel start and stop workers",
		get: func(s *Settings) any { return &s.NumProvisionWorkers }},
	{Name: "retry-count", Type: "int", Default: "10", Min: "0", Max: "100", Doc: "retries after the first start attempt",
		get: func(s *Settings) any { return &s.RetryCount }},
	{Name: "retry-delay", Type: "duration", Default: "10s", Min: "0s", Max: "1h", Doc: "wait between start attempts",
		get: func(s *Settings) any { return &s.RetryDelay }},
	{Name: "auto-retry-max", Type: "duration", Default: "30m", Min: "1s", Max: "24h", Doc: "cap of the automatic retry backoff for retryable errors",
		get: func(s *Settings) any { return &s.AutoRetryMax }},
	{Name: "zone-failure-ttl", Type: "duration", Default: "3m", Min: "0s", Max: "24h", Doc: "how long a zone out of capacity is avoided for a shape",
		get: func(s *Settings) any { return &s.ZoneFailureTTL }},
	{Name: "resync-interval", Type: "duration", Default: "5m", Min: "1s", Max: "24h", Doc: "period of the full reconcile pass",
		get: func(s *Settings) any { return &s.ResyncInterval }},
	{Name: "agent-heartbeat", Type: "duration", Default: "10s", Min: "100ms", Max: "1h", Doc: "agent heartbeat period; down after three missed",
		get: func(s *Settings) any { return &s.AgentHeartbeat }},
	{Name: "rate-limit-burst", Type: "int", Default: "20", Min: "1", Max: "100000", Doc: "burst of the client-side provider call bucket",
		get: func(s *Settings) any { return &s.RateLimitBurst }},
	{Name: "rate-limit-rate", Type: "float", Default: "100", Min: "0.01", Max: "100000", Doc: "provider calls per second of the client-side bucket",
		get: func(s *Settings) any { return &s.RateLimitRate }},
	{Name: "sim-agents", Type: "bool", Default: "true", Doc: "run simulated agents on sim instances",
		get: func(s *Settings) any { return &s.SimAgents }},
	{Name: "batch-starts", Type: "bool", Default: "true", Doc: "launch many like machines in one provider call where the provider can",
		get: func(s *Settings) any { return &s.BatchStarts }},
	{Name: "event-retention", Type: "duration", Default: "168h", Min: "1h", Max: "8760h", Doc: "events and change-log entries older than this are trimmed",
		get: func(s *Settings) any { return &s.EventRetention }},
	{Name: "registration-timeout", Type: "duration", Default: "10m", Min: "0s", Max: "24h", Doc: "an instance running this long without its agent ever started is replaced; 0 = off",
		get: func(s *Settings) any { return &s.RegistrationTimeout }},
	{Name: "unhealthy-after", Type: "duration", Default: "0s", Min: "0s", Max: "168h", Doc: "a machine whose agent is down this long is replaced; 0 = off",
		get: func(s *Settings) any { return &s.UnhealthyAfter }},
	{Name: "max-unhealthy", Type: "percent", Default: "40%", Min: "0", Max: "100", Doc: "above this share of a group unhealthy, nothing is replaced for health",
		get: func(s *Settings) any { return &s.MaxUnhealthy }},
	{Name: "max-in-flight", Type: "percent", Default: "10%", Min: "0", Max: "100", Doc: "share of a group replaced at once (at least one machine)",
		get: func(s *Settings) any { return &s.MaxInFlight }},
	{Name: "harvest-quarantine", Type: "duration", Default: "0s", Min: "0s", Max: "720h", Doc: "unknown instances are stopped and kept this long before they are terminated; 0 = off",
		get: func(s *Settings) any { return &s.HarvestQuarantine }},
	{Name: "harvest-max-fraction", Type: "float", Default: "0.5", Min: "0.01", Max: "1", Doc: "most of the live instances one harvest pass may stop as unknown",
		get: func(s *Settings) any { return &s.HarvestMaxFraction }},
}

// LookupSettingKey returns the key named name.
func LookupSettingKey(name string) (SettingKey, bool) {
	for _, k := range SettingKeys {
		if k.Name == name {
			return k, true
		}
	}
	return SettingKey{}, false
}

// Get returns the value of key in s, formatted as Set accepts it.
func (s Settings) Get(key string) (string, error) {
	if _, _, ok := splitGroupKey(key); ok {
		return s.GroupSettings()[key], nil
	}
	k, ok := LookupSettingKey(key)
	if !ok {
		return "", unknownSetting(key)
	}
	switch p := k.get(&s).(type) {
	case *time.Duration:
		return p.String(), nil
	case *int:
		return strconv.Itoa(*p), nil
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64), nil
	case *bool:
		return strconv.FormatBool(*p), nil
	case *HarvestMode:
		return string(*p), nil
	case *Percent:
		return strconv.Itoa(int(*p)) + "%", nil
	}
	return "", Errorf(EInternal, "setting %q has no type", key)
}

// Set parses value for key and stores it in s. On error s is unchanged; the
// error has code EInvalid and names the key and value.
func (s *Settings) Set(key, value string) error {
	if g, name, ok := splitGroupKey(key); ok {
		return s.setGroup(g, name, value)
	}
	k, ok := LookupSettingKey(key)
	if !ok {
		return unknownSetting(key)
	}
	return k.set(s, value)
}

// Map returns every setting formatted, keyed by name.
func (s Settings) Map() map[string]string {
	m := make(map[string]string, len(SettingKeys))
	for _, k := range SettingKeys {
		m[k.Name], _ = s.Get(k.Name)
	}
	for k, v := range s.GroupSettings() {
		m[k] = v
	}
	return m
}

// Validate checks every setting against its range.
func (s Settings) Validate() error {
	for _, k := range SettingKeys {
		v, _ := s.Get(k.Name)
		var tmp Settings
		if err := k.set(&tmp, v); err != nil {
			return err
		}
	}
	return nil
}

func unknownSetting(key string) error {
	names := make([]string, len(SettingKeys))
	for i, k := range SettingKeys {
		names[i] = k.Name
	}
	sort.Strings(names)
	return Errorf(EInvalid, "unknown model-config key %q (known: %s)", key, strings.Join(names, ", "))
}

func (k SettingKey) set(s *Settings, value string) error {
	bad := func(why string) error {
		return Errorf(EInvalid, "bad %s %q: %s", k.Name, value, why)
	}
	switch p := k.get(s).(type) {
	case *time.Duration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return bad("want a duration such as 10s or 5m")
		}
		lo, _ := time.ParseDuration(k.Min)
		hi, _ := time.ParseDuration(k.Max)
		if d < lo || d > hi {
			return bad(fmt.Sprintf("want between %s and %s", k.Min, k.Max))
		}
		*p = d
	case *int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return bad("want a whole number")
		}
		lo, _ := strconv.Atoi(k.Min)
		hi, _ := strconv.Atoi(k.Max)
		if n < lo || n > hi {
			return bad(fmt.Sprintf("want between %s and %s", k.Min, k.Max))
		}
		*p = n
	case *float64:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return bad("want a number")
		}
		lo, _ := strconv.ParseFloat(k.Min, 64)
		hi, _ := strconv.ParseFloat(k.Max, 64)
		if !(f >= lo && f <= hi) {
			return bad(fmt.Sprintf("want between %s and %s", k.Min, k.Max))
		}
		*p = f
	case *bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return bad("want true or false")
		}
		*p = b
	case *HarvestMode:
		m, err := ParseHarvestMode(value)
		if err != nil {
			return err
		}
		*p = m
	case *Percent:
		n, err := strconv.Atoi(strings.TrimSuffix(value, "%"))
		if err != nil {
			return bad("want a share such as 40%")
		}
		lo, _ := strconv.Atoi(k.Min)
		hi, _ := strconv.Atoi(k.Max)
		if n < lo || n > hi {
			return bad(fmt.Sprintf("want between %s%% and %s%%", k.Min, k.Max))
		}
		*p = Percent(n)
	default:
		return Errorf(EInternal, "setting %q has no type", k.Name)
	}
	return nil
}
