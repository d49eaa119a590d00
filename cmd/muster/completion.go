package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

// Dynamic completion: what the controller knows (models, machine ids),
// asked for with a short deadline; nothing is offered when it does not
// answer in time.
type completeFunc = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective)

func completeFrom(o *globalOptions, list func(ctx context.Context, o *globalOptions) ([]string, error)) completeFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		names, err := list(ctx, o)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeModels offers the controller's model names.
func completeModels(o *globalOptions) completeFunc {
	return completeFrom(o, func(ctx context.Context, o *globalOptions) ([]string, error) {
		c, _, err := o.connect(ctx)
		if err != nil {
			return nil, err
		}
		ms, err := c.Models(ctx)
		var names []string
		for _, m := range ms {
			names = append(names, m.Name)
		}
		return names, err
	})
}

// completeMachineIDs offers the ids of the model's machines.
func completeMachineIDs(o *globalOptions) completeFunc {
	return completeFrom(o, func(ctx context.Context, o *globalOptions) ([]string, error) {
		c, model, err := o.connect(ctx)
		if err != nil {
			return nil, err
		}
		st, err := c.Status(ctx, model)
		return sortedIDs(st.Machines), err
	})
}
