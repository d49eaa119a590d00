package muster

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"sync/atomic"
)

// AgentConfig is what a machine agent needs to log in (SPEC §4). The
// provisioner writes it as JSON into StartParams.UserData; the docker
// provider places it in the container, cloud-init on a VM.
type AgentConfig struct {
	Controller   string   `json:"controller"`         // controller uuid
	Model        string   `json:"model"`              // model uuid (or name)
	Machine      string   `json:"machine"`            // machine id
	Nonce        string   `json:"nonce,omitempty"`    // the provisioning attempt's nonce
	Password     string   `json:"password,omitempty"` // the agent's password, in clear
	APIAddresses []string `json:"api-addresses"`      // controller URLs, https://host:port, tried in order
	CACert       string   `json:"ca-cert"`            // PEM certificate of the controller's CA
	// EnrolToken, in the shared user data of a batch start, is the batch's
	// one-time enrolment token: the agent enrols with it (and the
	// instance's signed identity) for its machine's nonce and password,
	// which the config then lacks (SPEC §4).
	EnrolToken string `json:"enrol-token,omitempty"`
	// MetadataURL is where an enrolling agent reads its instance identity
	// (EC2's instance metadata service, http://169.254.169.254/latest, by
	// default).
	MetadataURL string `json:"metadata-url,omitempty"`
}

// Enrolling reports whether c is an enrolment config: a batch token and
// no password yet.
func (c AgentConfig) Enrolling() bool { return c.EnrolToken != "" && c.Password == "" }

// ParseAgentConfig decodes a JSON agent configuration and validates it.
// Unknown keys are ignored, so that an older agent accepts the
// configuration of a newer controller.
func ParseAgentConfig(data []byte) (AgentConfig, error) {
	var c AgentConfig
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return c, Errorf(EInvalid, "agent config is empty")
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return AgentConfig{}, &Error{Code: EInvalid, Message: fmt.Sprintf("bad agent config: %v", err), Err: err}
	}
	if err := c.Validate(); err != nil {
		return AgentConfig{}, err
	}
	return c, nil
}

// Validate checks that every field needed to log in is present and well
// formed; the error (EInvalid) names the first bad key.
func (c AgentConfig) Validate() error {
	need := []struct{ key, val string }{
		{"model", c.Model}, {"machine", c.Machine}, {"nonce", c.Nonce}, {"password", c.Password}, {"ca-cert", c.CACert},
	}
	if c.Enrolling() {
		// The machine, nonce and password come from enrolment.
		need = []struct{ key, val string }{{"model", c.Model}, {"ca-cert", c.CACert}}
	}
	for _, f := range need {
		if f.val == "" {
			return Errorf(EInvalid, "bad agent config: %s is missing", f.key)
		}
	}
	if len(c.APIAddresses) == 0 {
		return Errorf(EInvalid, "bad agent config: api-addresses is missing")
	}
	for _, a := range c.APIAddresses {
		u, err := url.Parse(a)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return Errorf(EInvalid, "bad agent config: api-addresses: bad address %q: want https://host:port", a)
		}
	}
	if c.MetadataURL != "" {
		u, err := url.Parse(c.MetadataURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Errorf(EInvalid, "bad agent config: metadata-url: bad URL %q: want http://host/path", c.MetadataURL)
		}
	}
	if p := validCA.Load(); p != nil && *p == c.CACert {
		return nil
	}
	block, _ := pem.Decode([]byte(c.CACert))
	if block == nil || block.Type != "CERTIFICATE" {
		return Errorf(EInvalid, "bad agent config: ca-cert: no PEM certificate")
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return Errorf(EInvalid, "bad agent config: ca-cert: %v", err)
	}
	validCA.Store(&c.CACert)
	return nil
}

// validCA is the last CA certificate Validate parsed: the thousands of
// simulated agents a controller starts share one, parsed once.
var validCA atomic.Pointer[string]
