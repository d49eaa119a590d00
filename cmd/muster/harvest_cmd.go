package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newHarvestCmd(o *globalOptions) *cobra.Command {
	var plan bool
	var restore string
	cmd := &cobra.Command{
		Use:   "harvest --plan | --restore ID",
		Short: "List quarantined instances and what harvest does next, or restore a quarantined instance",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if plan == (restore != "") {
				return usageErrorf("give either --plan or --restore ID")
			}
			c, model, err := o.connect(cmd.Context())
			if err == nil && restore != "" {
				if err = c.RestoreInstance(cmd.Context(), model, restore); err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "instance %s restored: started, never harvested again\n", restore)
				}
			}
			if err != nil {
				return err
			}
			p, err := c.HarvestPlan(cmd.Context(), model) // after a restore, it shows the instance restored
			if err != nil {
				return err
			}
			return p.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&plan, "plan", false, "list what is quarantined and what harvest does next")
	cmd.Flags().StringVar(&restore, "restore", "", "start quarantined instance `ID` again and release it from harvest")
	return cmd
}

func newExplainCmd(o *globalOptions) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "explain ID",
		Short: "Explain each start attempt of a machine: zones considered, errors, what happens next",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := checkFormat(format, "text", "json")
			if err == nil {
				err = checkMachineIDs(args)
			}
			if err != nil {
				return err
			}
			c, model, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			e, err := c.Explain(cmd.Context(), model, args[0])
			if err != nil {
				return err
			}
			return e.Write(cmd.OutOrStdout(), format)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text or json")
	return cmd
}
