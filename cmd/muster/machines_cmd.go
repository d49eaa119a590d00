package main

import (
	"fmt"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
)

func newAddMachineCmd(o *globalOptions) *cobra.Command {
	var (
		req  api.AddMachinesRequest
		to   string
		wait string
	)
	cmd := &cobra.Command{
		Use:   "add-machine",
		Short: "Declare machines; prints their ids, one per line",
		Long: `Declare machines; prints their ids, one per line.

With --wait it waits until every new machine has started (its instance
running and its agent logged in), or with --wait=instances until their
instances run, showing both phases on stderr; it fails as soon as a
machine is in provisioning error, naming it. Interrupted, it leaves the
machines provisioning. Where no agent reports (sim-agents=false, an ec2
model on a sim without agents) use --wait=instances.`,
		Example: `  muster add-machine -n 3 --constraints "cores=2 mem=4GB" --wait
  muster add-machine --to zone=b --base ubuntu@22.04
  muster add-machine -m staging --group web --wait=instances`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			goal, ok := map[string]api.Goal{"": nil, "started": api.Started, "instances": api.Provisioned}[wait]
			if !ok {
				return usageErrorf("bad --wait %q: want started or instances", wait)
			}
			if req.Count < 1 || req.Count > api.MaxAddMachines {
				return usageErrorf("bad -n %d: want 1..%d", req.Count, api.MaxAddMachines)
			}
			if to != "" {
				if !strings.HasPrefix(to, "zone=") || strings.TrimPrefix(to, "zone=") == "" {
					return usageErrorf("bad --to %q: want zone=NAME", to)
				}
				req.Placement = to
			}
			// Checked here too so that bad input is refused before any
			// request; the controller checks again.
			if _, err := muster.ParseConstraints(req.Constraints); err != nil {
				return err
			}
			for _, s := range req.Storage {
				if _, err := muster.ParseStorage(s); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			ids, err := c.AddMachines(ctx, model, req)
			if err != nil {
				return err
			}
			for _, id := range ids {
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			if goal == nil {
				return nil
			}
			goals := map[string]api.Goal{}
			for _, id := range ids {
				goals[id] = goal
			}
			failures, err := c.WaitShowing(ctx, model, goals, cmd.ErrOrStderr(), "provisioning", true)
			if err != nil {
				return err
			}
			return api.FailureError(failures, len(ids))
		},
	}
	f := cmd.Flags()
	f.IntVarP(&req.Count, "num", "n", 1, "number of machines")
	f.StringVar(&req.Constraints, "constraints", "", `constraints, e.g. "cores=2 mem=4G zones=a,b"`)
	f.StringVar(&req.Group, "group", "", "spread group")
	f.StringVar(&req.Base, "base", "", "base, e.g. ubuntu@24.04 (default ubuntu@24.04)")
	f.StringVar(&to, "to", "", "placement, zone=NAME")
	f.StringArrayVar(&req.Storage, "storage", nil, "storage name=size[,pool=P] (repeatable)")
	f.StringVar(&wait, "wait", "", "wait until the machines have started, or with --wait=instances until their instances run")
	f.Lookup("wait").NoOptDefVal = "started"
	return cmd
}

func newRemoveMachineCmd(o *globalOptions) *cobra.Command {
	var (
		req  api.RemoveMachinesRequest
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "remove-machine ID... | --all",
		Short: "Mark machines dying; --force makes them dead at once",
		Example: `  muster remove-machine 3 4 --wait
  muster remove-machine --all --force`,
		ValidArgsFunction: completeMachineIDs(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.All == (len(args) > 0) {
				return usageErrorf("give machine ids or --all, not both and not neither")
			}
			if err := checkMachineIDs(args); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			req.IDs = args
			ids, err := c.RemoveMachinesIDs(ctx, model, req)
			if err != nil || !wait {
				return err
			}
			goals := map[string]api.Goal{}
			for _, id := range ids {
				goals[id] = api.Removed
			}
			_, err = c.WaitShowing(ctx, model, goals, cmd.ErrOrStderr(), "removing", false)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&req.All, "all", false, "every machine of the model")
	f.BoolVar(&req.KeepInstance, "keep-instance", false, "leave the machines' instances running")
	f.BoolVar(&req.Force, "force", false, "make the machines dead at once")
	f.BoolVar(&wait, "wait", false, "wait until the machines are removed")
	return cmd
}

func newRetryProvisioningCmd(o *globalOptions) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:               "retry-provisioning ID... | --all",
		Short:             "Try machines in provisioning error again",
		ValidArgsFunction: completeMachineIDs(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return usageErrorf("give machine ids or --all, not both and not neither")
			}
			if err := checkMachineIDs(args); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			ids, err := c.RetryProvisioning(ctx, model, api.RetryProvisioningRequest{IDs: args, All: all})
			if err != nil {
				return err
			}
			for _, id := range ids {
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every machine in provisioning error")
	return cmd
}

func newShowMachineCmd(o *globalOptions) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:               "show-machine ID",
		Short:             "Show one machine in full, with its recent events",
		Example:           "  muster show-machine 3 -o json",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeMachineIDs(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkMachineIDs(args); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			d, err := c.Machine(ctx, model, args[0])
			if err != nil {
				return err
			}
			return api.WriteAs(cmd.OutOrStdout(), format, d.Shown(), nil, nil)
		},
	}
	formatFlag(cmd, &format, "yaml", "json")
	return cmd
}
