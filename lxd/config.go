package lxd

import (
	"log/slog"
	"regexp"
	"slices"
	"strings"

	"github.com/musterhq/muster"
)

// Defaults of a Config.
const (
	DefaultImage       = "muster/debian-bookworm"
	DefaultStoragePool = "default"
)

// DefaultZones are the zones of a Config that names none.
var DefaultZones = []string{"a", "b", "c"}

// ConfigKeys are the model config keys of an lxd model, e.g.
// `muster add-model box --provider lxd --config zones=a,b,c`.
var ConfigKeys = []string{"zones", "socket", "image", "storage-pool"}

// Config configures a Provider for one model of one controller.
type Config struct {
	ControllerUUID string // required
	ModelUUID      string // required
	ModelName      string // for logs; optional
	// Zones are the zone names, each a managed bridge network of its own;
	// default DefaultZones.
	Zones []string
	// Socket is the daemon's unix socket; default DefaultSocket.
	Socket string
	// Image is the alias of the image instances are made from (Debian
	// with cloud-init, see BuildImage); default DefaultImage.
	Image string
	// StoragePool holds root disks and volumes; default DefaultStoragePool.
	StoragePool string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

var (
	zoneRE  = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
	aliasRE = regexp.MustCompile(`^[^\s/][^\s]{0,254}$`)
)

// ParseConfig returns the Config of an lxd model's config (zones=a,b,c,
// socket=PATH, image=ALIAS, storage-pool=P), defaults filled in; the
// caller sets the uuids. Unknown keys and bad values are EInvalid errors
// naming the key. It does not talk to the daemon.
func ParseConfig(settings map[string]string) (Config, error) {
	var c Config
	for k, v := range settings {
		switch k {
		case "zones":
			if v != "" {
				c.Zones = strings.Split(v, ",")
			}
		case "socket":
			c.Socket = v
		case "image":
			c.Image = v
		case "storage-pool":
			c.StoragePool = v
		default:
			return Config{}, muster.Errorf(muster.EInvalid, "unknown lxd provider config key %q (known: %s)", k, strings.Join(ConfigKeys, ", "))
		}
	}
	if err := c.check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// check fills in defaults and checks the values.
func (c *Config) check() error {
	if len(c.Zones) == 0 {
		c.Zones = slices.Clone(DefaultZones)
	}
	seen := map[string]bool{}
	for _, z := range c.Zones {
		if !zoneRE.MatchString(z) {
			return muster.Errorf(muster.EInvalid, "lxd provider: bad zones: bad zone name %q: want letters, digits, '_', '.', '-'", z)
		}
		if seen[z] {
			return muster.Errorf(muster.EInvalid, "lxd provider: bad zones: zone %q given more than once", z)
		}
		seen[z] = true
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	if !strings.HasPrefix(c.Socket, "/") {
		return muster.Errorf(muster.EInvalid, "lxd provider: bad socket %q: want an absolute path", c.Socket)
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if !aliasRE.MatchString(c.Image) {
		return muster.Errorf(muster.EInvalid, "lxd provider: bad image %q: want an image alias", c.Image)
	}
	if c.StoragePool == "" {
		c.StoragePool = DefaultStoragePool
	}
	if !zoneRE.MatchString(c.StoragePool) {
		return muster.Errorf(muster.EInvalid, "lxd provider: bad storage-pool %q", c.StoragePool)
	}
	return nil
}
