package main

import (
	"context"
	"time"

	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
)

// completeFrom is dynamic completion with what the controller knows,
// asked with a short deadline; nothing is offered when it does not answer.
func completeFrom(o *globalOptions, list func(ctx context.Context, c *api.Client, model string) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		c, model, err := o.connect(ctx)
		var names []string
		if err == nil {
			names, err = list(ctx, c, model)
		}
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeModels offers the controller's model names.
func completeModels(o *globalOptions) cobra.CompletionFunc {
	return completeFrom(o, func(ctx context.Context, c *api.Client, _ string) (names []string, err error) {
		ms, err := c.Models(ctx)
		for _, m := range ms {
			names = append(names, m.Name)
		}
		return names, err
	})
}

// completeMachineIDs offers the ids of the model's machines.
func completeMachineIDs(o *globalOptions) cobra.CompletionFunc {
	return completeFrom(o, func(ctx context.Context, c *api.Client, model string) ([]string, error) {
		st, err := c.Status(ctx, model)
		return sortedIDs(st.Machines), err
	})
}
