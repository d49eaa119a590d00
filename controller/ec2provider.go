package controller

import (
	"context"
	"fmt"

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
	p, err := ec2.Open(ctx, cfg, env.ControllerUUID, env.Model.UUID)
	if err != nil {
		return nil, fmt.Errorf("open ec2 provider of model %s: %w", env.Model.Name, err)
	}
	return &ModelProvider{Provider: p, Close: func() error { return nil }}, nil
}

func validateEC2Config(config map[string]string) error {
	var cfg ec2.Config
	return ec2.ApplyModelConfig(&cfg, config)
}
