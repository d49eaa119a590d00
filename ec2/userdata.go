package ec2

import (
	"fmt"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/cloudinit"
)

// Paths on the instance (see package cloudinit).
const (
	caPath          = cloudinit.CAPath
	agentConfigPath = cloudinit.AgentConfigPath
	agentsDir       = cloudinit.AgentsDir
	bootstrapPath   = cloudinit.BootstrapPath
	unitPath        = cloudinit.UnitPath
)

// maxUserData is EC2's limit on user data, in bytes before base64.
const maxUserData = 16384

// launchIndex is the part of a batch's bootstrap script that finds the
// instance's launch index through IMDSv2 (cloudinit.Batch then keeps that
// index's agent config).
const launchIndex = `md=http://169.254.169.254/latest
tok=$(curl -fsS --retry 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' $md/api/token)
i=$(curl -fsS --retry 5 -H "X-aws-ec2-metadata-token: $tok" $md/meta-data/ami-launch-index)
`

type (
	launch      = cloudinit.Launch
	agentSetup  = cloudinit.Agent
	cloudConfig = cloudinit.Config
	writeFile   = cloudinit.File
)

// agentFor checks sp's agent config and finds its agent binary; nil, nil
// without an agent.
func agentFor(sp muster.StartParams, arch string) (*agentSetup, error) {
	a, err := cloudinit.AgentFor(sp, arch)
	if err != nil {
		return nil, ec2Err(err)
	}
	return a, nil
}

// singleUserData is the #cloud-config of one start; nil without an agent.
func singleUserData(a *agentSetup) ([]byte, error) {
	ud, err := cloudinit.Single(a)
	return ud, ec2Err(err)
}

// batchUserData is the #cloud-config of a batch (one RunInstances with
// MaxCount len(ls)); each instance finds its own config by its launch
// index from the metadata service.
func batchUserData(ls []launch, agents []*agentSetup) ([]byte, error) {
	ud, err := cloudinit.Batch(ls, agents, launchIndex)
	return ud, ec2Err(err)
}

// parseLaunches reads a batch's launch index → machine and launch token
// back from its user data.
func parseLaunches(data []byte) (map[int]launch, error) { return cloudinit.ParseLaunches(data) }

// ec2Err prefixes a cloudinit error's message with "ec2: ", keeping its
// kind.
func ec2Err(err error) error {
	if err == nil {
		return nil
	}
	kind := muster.ProviderErrorKindOf(err)
	if kind == 0 {
		return fmt.Errorf("ec2: %w", err)
	}
	return &muster.ProviderError{Kind: kind, Message: "ec2: " + err.Error(), Err: err}
}
