package main

import (
	"context"
	"os"
	"runtime"

	"github.com/musterhq/muster"
)

// selfAgentBinaries offers the controller's own binary as the agent binary
// for its version, OS and architecture, and nothing else.
type selfAgentBinaries struct{}

var _ muster.AgentBinaryFinder = selfAgentBinaries{}

func (selfAgentBinaries) FindAgentBinaries(_ context.Context, version, osName, arch string) ([]muster.AgentBinary, error) {
	if version != muster.Version || osName != runtime.GOOS || arch != runtime.GOARCH {
		return nil, muster.Errorf(muster.ENotFound, "no matching agent binaries available for %s/%s version %s", osName, arch, version)
	}
	path, _ := os.Executable()
	return []muster.AgentBinary{{Version: version, OS: osName, Arch: arch, Path: path}}, nil
}
