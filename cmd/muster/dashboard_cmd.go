package main

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"
)

// newDashboardCmd is `muster dashboard`: it prints a dashboard URL with a
// one-time sign-in code (SPEC §5.2), never the admin token.
func newDashboardCmd(o *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "dashboard",
		Short: "Print a dashboard URL with a one-time sign-in code",
		Long: "Print a URL that signs a browser in to the controller's dashboard.\n" +
			"The link carries a one-time code, not the admin token: it works once,\n" +
			"for a few minutes; the browser then keeps a session cookie.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			u, err := c.DashboardURL(ctx)
			if err != nil {
				return err
			}
			if model != "" && model != "default" {
				u += "#model=" + url.QueryEscape(model)
			}
			fmt.Fprintln(cmd.OutOrStdout(), u)
			return nil
		},
	}
}
