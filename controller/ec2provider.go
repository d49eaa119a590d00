package controller

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/musterhq/muster/ec2"
	"github.com/musterhq/muster/sim"
)

// openEC2Provider opens a model's EC2 provider. Credentials come from the
// standard AWS chain of the controller's environment, never from the
// model's config or the store; for an endpoint on a loopback address with
// no credentials in the chain, the key pair `muster sim serve` accepts by
// default.
func openEC2Provider(ctx context.Context, env ProviderEnv) (*ModelProvider, error) {
	cfg := ec2.Config{Logger: env.Logger,
		LoopbackCredentials: credentials.NewStaticCredentialsProvider(sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey, "")}
	if err := ec2.ApplyModelConfig(&cfg, env.Model.Config); err != nil {
		return nil, err
	}
	if ep := env.Model.Config["endpoint"]; ep != "" && cfg.IdentityCert == nil {
		cert, err := simIdentityCert(ctx, ep)
		if err != nil {
			env.Logger.Info("no instance identity certificate from the endpoint: batches carry each machine's agent config", "endpoint", ep, "err", err)
		}
		cfg.IdentityCert = cert
	}
	p, err := ec2.Open(ctx, cfg, env.ControllerUUID, env.Model.UUID)
	if err != nil {
		return nil, fmt.Errorf("open ec2 provider of model %s: %w", env.Model.Name, err)
	}
	return &ModelProvider{Provider: p, IdentityCert: cfg.IdentityCert, Close: func() error { return nil }}, nil
}

// simIdentityCert reads the certificate of the instance identity documents
// of a sim (`muster sim serve`) whose EC2 API is at endpoint (its root or
// /ec2/): GET /v1/identity-cert of the sim's own API.
func simIdentityCert(ctx context.Context, endpoint string) ([]byte, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/ec2") + "/v1/identity-cert"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if block, _ := pem.Decode(b); block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("GET %s: no PEM certificate", u)
	}
	return b, nil
}

func validateEC2Config(config map[string]string) error {
	var cfg ec2.Config
	return ec2.ApplyModelConfig(&cfg, config)
}
