package docker

import (
	"slices"
	"strings"

	"github.com/musterhq/muster"
)

// ConfigKeys are the model config keys (muster.Model.Config) of a docker
// model, e.g. `muster add-model dk --provider docker --config zones=a,b`.
var ConfigKeys = []string{"zones", "network-mode", "docker-host", "subnets"}

// ApplyModelConfig sets cfg's fields from a docker model's config and checks
// them without talking to the engine:
//
//	zones=a,b,c                       Config.Zones (default a,b,c)
//	network-mode=bridge|host          Config.NetworkMode (default bridge)
//	docker-host=unix:///run/docker.sock  Config.Host (default DOCKER_HOST)
//	subnets=a=10.77.1.0/24,b=10.77.2.0/24  Config.Subnets
//
// Unknown keys and bad values are EInvalid errors naming the key.
func ApplyModelConfig(cfg *Config, settings map[string]string) error {
	c := *cfg
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := settings[k]
		switch k {
		case "zones":
			c.Zones = nil
			if v != "" {
				c.Zones = strings.Split(v, ",")
			}
		case "network-mode":
			c.NetworkMode = v
		case "docker-host":
			c.Host = v
		case "subnets":
			c.Subnets = map[string]string{}
			for _, item := range strings.Split(v, ",") {
				if item == "" {
					continue
				}
				zone, cidr, ok := strings.Cut(item, "=")
				if !ok {
					return muster.Errorf(muster.EInvalid, "docker provider: bad subnets %q: want zone=CIDR,...", v)
				}
				c.Subnets[zone] = cidr
			}
		default:
			return muster.Errorf(muster.EInvalid, "unknown docker provider config key %q (known: %s)", k, strings.Join(ConfigKeys, ", "))
		}
	}
	if _, err := c.check(); err != nil {
		return err
	}
	*cfg = c
	return nil
}
