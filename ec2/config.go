package ec2

import (
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/musterhq/muster"
)

// ConfigKeys are the model config keys (muster.Model.Config) of an ec2
// model, e.g. `muster add-model aws --provider ec2 --config region=us-east-1`.
var ConfigKeys = []string{"region", "endpoint", "profile", "identity-cert"}

// Config configures a Provider. Credentials never come from a model's
// config: they come from the standard AWS chain.
type Config struct {
	// Region is the AWS region, e.g. "us-east-1". Required.
	Region string
	// Endpoint is the EC2 endpoint URL, e.g. "http://127.0.0.1:7070" for
	// the sim; "" means the region's AWS endpoint.
	Endpoint string
	// Profile is the shared config profile (~/.aws/config) to use; ""
	// means the default (or AWS_PROFILE).
	Profile string
	// HTTPClient, when set, makes the requests; default the SDK's.
	HTTPClient *http.Client
	// Credentials, when set, replaces the standard AWS credential chain
	// (environment, shared config and credentials files, profile, SSO,
	// instance role via IMDS). For tests.
	Credentials aws.CredentialsProvider
	// LoopbackCredentials, when set, are used for an Endpoint on a
	// loopback address when the chain has none: the controller passes the
	// key pair `muster sim serve` accepts by default. With a loopback
	// Endpoint the chain never asks the instance metadata service.
	LoopbackCredentials aws.CredentialsProvider
	// Logger gets the provider's records; default slog.Default().
	Logger *slog.Logger
	// IdentityCert is the PEM certificate that verifies the region's
	// instance identity documents (AWS publishes one per region; a sim
	// serves its own). With it, a batch's instances enrol for their
	// credentials (SPEC §4); without it, batches carry each machine's
	// agent config as single starts do.
	IdentityCert []byte
}

// regionRE matches region names such as us-east-1, ap-southeast-2,
// us-gov-west-1 and eusc-de-east-1.
var regionRE = regexp.MustCompile(`^[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}$`)

// credentialWords mark config keys that would hold credentials.
var credentialWords = []string{"access-key", "accesskey", "secret", "token", "password", "credential", "session", "key-id"}

// ApplyModelConfig sets cfg's fields from an ec2 model's config and checks
// them without calling AWS:
//
//	region=us-east-1                  Config.Region (required)
//	endpoint=http://HOST:PORT         Config.Endpoint (default: the region's AWS endpoint)
//	profile=NAME                      Config.Profile (default: the default profile)
//	identity-cert=FILE                Config.IdentityCert, read from FILE (PEM) on the controller's host
//
// Unknown keys, keys that look like credentials and bad values are EInvalid
// errors naming the key. cfg is changed only when the whole config is good.
func ApplyModelConfig(cfg *Config, m map[string]string) error {
	c := *cfg
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m[k]
		switch k {
		case "region":
			c.Region = v
		case "endpoint":
			c.Endpoint = v
		case "profile":
			c.Profile = v
		case "identity-cert":
			b, err := os.ReadFile(v)
			if err != nil {
				return muster.Errorf(muster.EInvalid, "ec2 provider: identity-cert: %v", err)
			}
			if block, _ := pem.Decode(b); block == nil || block.Type != "CERTIFICATE" {
				return muster.Errorf(muster.EInvalid, "ec2 provider: identity-cert: %s holds no PEM certificate", v)
			} else if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				return muster.Errorf(muster.EInvalid, "ec2 provider: identity-cert: %s: %v", v, err)
			}
			c.IdentityCert = b
		default:
			if looksLikeCredential(k) {
				return muster.Errorf(muster.EInvalid, "ec2 provider: config key %q looks like a credential: muster never stores credentials; use the AWS credential chain (environment, ~/.aws/credentials, profile=NAME, SSO or an instance role)", k)
			}
			return muster.Errorf(muster.EInvalid, "unknown ec2 provider config key %q (known: %s)", k, strings.Join(ConfigKeys, ", "))
		}
	}
	if err := c.check(); err != nil {
		return err
	}
	*cfg = c
	return nil
}

func looksLikeCredential(key string) bool {
	k := strings.ToLower(strings.ReplaceAll(key, "_", "-"))
	for _, w := range credentialWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// check validates the region, endpoint and profile.
func (c *Config) check() error {
	switch {
	case c.Region == "":
		return muster.Errorf(muster.EInvalid, "ec2 provider: region is required, e.g. region=us-east-1")
	case !regionRE.MatchString(c.Region):
		return muster.Errorf(muster.EInvalid, "ec2 provider: bad region %q: want a region name such as us-east-1", c.Region)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
			return muster.Errorf(muster.EInvalid, "ec2 provider: bad endpoint %q: want an absolute http(s) URL with a host, e.g. https://ec2.us-east-1.amazonaws.com", c.Endpoint)
		case u.User != nil:
			return muster.Errorf(muster.EInvalid, "ec2 provider: bad endpoint %q: no user info allowed (credentials come from the AWS credential chain)", c.Endpoint)
		case u.RawQuery != "" || u.Fragment != "":
			return muster.Errorf(muster.EInvalid, "ec2 provider: bad endpoint %q: no query or fragment allowed", c.Endpoint)
		}
	}
	if c.Profile != "" {
		if len(c.Profile) > 128 || strings.IndexFunc(c.Profile, func(r rune) bool {
			return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '[' || r == ']'
		}) >= 0 {
			return muster.Errorf(muster.EInvalid, "ec2 provider: bad profile %q: want a profile name without spaces or brackets", c.Profile)
		}
	}
	return nil
}
