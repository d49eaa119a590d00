package main

import (
	"context"
	"fmt"
	"time"

	"github.com/musterhq/muster"
	"github.com/spf13/cobra"
)

func newVersionCmd(o *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print muster's version, commit and build date, and the controller's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "client:     muster %s\n", muster.BuildInfo())
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
			defer cancel()
			c, _, err := o.connect(ctx)
			var b muster.Build
			if err == nil {
				b, err = c.Version(ctx)
			}
			if err != nil {
				fmt.Fprintf(w, "controller: unknown (%s)\n", userError(err))
				return nil
			}
			fmt.Fprintf(w, "controller: muster %s at %s\n", b, c.URL())
			return nil
		},
	}
}
