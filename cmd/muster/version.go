package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/musterhq/muster"
	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print muster's version and build info",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "muster %s\n", muster.Version)
			fmt.Fprintf(cmd.OutOrStdout(), "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					switch s.Key {
					case "vcs.revision", "vcs.time", "vcs.modified":
						fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", s.Key, s.Value)
					}
				}
			}
			return nil
		},
	}
}
