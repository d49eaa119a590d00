package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/spf13/cobra"
)

func newAgentBinariesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent-binaries",
		Short: "Manage the controller's catalogue of agent binaries",
		Long: `Manage the catalogue of agent binaries (by version, OS and arch) in a
controller's data directory. The controller registers its own binary at
start; add others for machines of other architectures. A running controller
reads the catalogue at each lookup, so additions take effect at once.

The docker provider puts the agent binary into a FROM-scratch image, with
its loader and shared libraries copied from this host when it is
dynamically linked.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newAgentBinariesAddCmd(), newAgentBinariesListCmd())
	return cmd
}

func newAgentBinariesAddCmd() *cobra.Command {
	var dataDir, arch, osName, version string
	cmd := &cobra.Command{
		Use:   "add FILE --arch ARCH",
		Short: "Copy an agent binary into the catalogue",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if arch == "" {
				return usageErrorf("--arch is required")
			}
			e, err := controller.NewAgentCatalogue(dataDir).Add(args[0], version, osName, arch, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added agent binary %s %s/%s sha256 %s\n", e.Version, e.OS, e.Arch, e.SHA256)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "the controller's data directory")
	f.StringVar(&arch, "arch", "", "architecture of the binary (amd64, arm64, ...)")
	f.StringVar(&osName, "os", "linux", "operating system of the binary")
	f.StringVar(&version, "version", muster.Version, "muster version of the binary")
	return cmd
}

func newAgentBinariesListCmd() *cobra.Command {
	var dataDir, format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the agent binaries in the catalogue",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			es, err := controller.NewAgentCatalogue(dataDir).List()
			if err != nil {
				return err
			}
			if es == nil {
				es = []controller.AgentBinaryEntry{}
			}
			var rows [][]string
			for _, e := range es {
				p := e.Path
				if e.Self {
					p += " (controller)"
				}
				rows = append(rows, []string{e.Version, e.OS, e.Arch, strconv.FormatInt(e.Size, 10), e.SHA256[:min(12, len(e.SHA256))], p})
			}
			return api.WriteAs(cmd.OutOrStdout(), format, es, []string{"Version", "OS", "Arch", "Size", "SHA256", "Path"}, rows)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "the controller's data directory")
	formatFlag(cmd, &format, api.Formats...)
	return cmd
}
