package main

import (
	"fmt"

	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
)

func newRebalanceCmd(o *globalOptions) *cobra.Command {
	var req api.RebalanceRequest
	cmd := &cobra.Command{
		Use:   "rebalance [--group G] [--plan]",
		Short: "Move machines from the fullest zones to the emptiest, launch before stop",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, model, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.Rebalance(cmd.Context(), model, req)
			if err == nil {
				fmt.Fprint(cmd.OutOrStdout(), res)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&req.Group, "group", "", "only this group (default every group)")
	cmd.Flags().BoolVar(&req.Plan, "plan", false, "print the moves, change nothing")
	return cmd
}
