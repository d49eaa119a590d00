package main

import "github.com/spf13/cobra"

// newSimCmd is the parent of the commands that run and script the
// simulated cloud; each subcommand lives in a sim_*.go file.
func newSimCmd(o *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run and script the simulated cloud",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(
		withoutClientFlags(newSimServeCmd()),
		newSimZonesCmd(o),
		newSimSetZoneCmd(o),
		newSimFaultsCmd(o),
		newSimInstancesCmd(o),
		newSimAddInstanceCmd(o),
	)
	return cmd
}
