package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/spf13/cobra"
)

// globalOptions are the persistent flags every client command shares.
type globalOptions struct {
	config string // --config
	model  string // -m/--model
}

// refreshTimeout bounds the request that learns the live controllers.
const refreshTimeout = 2 * time.Second

// configPath is the client config to use: --config, MUSTER_CONFIG, else
// the default.
func (o *globalOptions) configPath() (string, error) {
	return clientConfigPath(o.config)
}

// modelName is the model to act on: -m, MUSTER_MODEL, the config's model,
// else "default".
func (o *globalOptions) modelName(cc *controller.ClientConfig) string {
	if o.model != "" {
		return o.model
	}
	if env := os.Getenv("MUSTER_MODEL"); env != "" {
		return env
	}
	if cc != nil && cc.Model != "" {
		return cc.Model
	}
	return muster.DefaultModel
}

// connect loads the client config and returns an API client for the first
// controller that answers, and the model to act on.
func (o *globalOptions) connect(ctx context.Context) (*api.Client, string, error) {
	path, err := o.configPath()
	if err != nil {
		return nil, "", err
	}
	cc, err := controller.LoadClientConfig(path)
	if err != nil {
		return nil, "", err
	}
	model := o.modelName(cc)
	c, err := dialControllers(ctx, cc)
	if err != nil {
		return nil, "", err
	}
	refreshControllers(ctx, path, cc, c)
	return c, model, nil
}

// dialControllers returns a client of the first of cc's controllers that
// answers.
func dialControllers(ctx context.Context, cc *controller.ClientConfig) (*api.Client, error) {
	return api.Dial(ctx, cc.Controllers, []byte(cc.CACert), cc.Token)
}

// refreshControllers records in the client config at path the live
// controllers c knows, when they changed.
func refreshControllers(ctx context.Context, path string, cc *controller.ClientConfig, c *api.Client) {
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	if !cc.LearnControllers(rctx, c) {
		return
	}
	if err := cc.Save(path); err != nil {
		fmt.Fprintf(os.Stderr, "warning: could not record the controllers' addresses in %s: %v\n", path, err)
	}
}

// clientConfigPath picks the config file: the --config flag, then
// MUSTER_CONFIG, then the default.
func clientConfigPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if env := os.Getenv("MUSTER_CONFIG"); env != "" {
		return env, nil
	}
	return controller.DefaultClientConfigPath()
}

// Output helpers; the formatting itself is in api (api/output.go).
var (
	printTable = api.WriteTable
	printJSON  = api.WriteJSON
	printYAML  = api.WriteYAML
	dash       = api.Dash
	yesNo      = api.YesNo
)

// newTabWriter aligns table output in columns.
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// formatFlag adds --format (-o, as kubectl's) with its choices, the first
// the default: completed, and checked before the command runs.
func formatFlag(cmd *cobra.Command, format *string, choices ...string) {
	cmd.Flags().StringVarP(format, "format", "o", choices[0], "output format: "+strings.Join(choices, ", "))
	cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions(choices, cobra.ShellCompDirectiveNoFileComp))
	cmd.PreRunE = func(*cobra.Command, []string) error { return checkFormat(*format, choices...) }
}

// checkFormat refuses a --format value outside allowed.
func checkFormat(format string, allowed ...string) error {
	if slices.Contains(allowed, format) {
		return nil
	}
	return usageErrorf("bad --format %q: want %s", format, strings.Join(allowed, ", "))
}

// sortedIDs returns the keys of m in numeric order.
func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	muster.SortMachineIDs(ids)
	return ids
}

// sortedKeys returns the keys of m sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkMachineIDs refuses ids that are not machine ids before anything is
// sent.
func checkMachineIDs(ids []string) error {
	for _, id := range ids {
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			return usageErrorf("bad machine id %q: want a number", id)
		}
	}
	return nil
}

// addClientCmds adds the commands that talk to a controller.
func addClientCmds(root *cobra.Command, o *globalOptions) {
	root.AddCommand(
		newAddMachineCmd(o),
		newRemoveMachineCmd(o),
		newRetryProvisioningCmd(o),
		newStatusCmd(o),
		newShowMachineCmd(o),
		newEventsCmd(o),
		newZonesCmd(o),
		newHarvestCmd(o), newExplainCmd(o),
		newApplyCmd(o),
		newRebalanceCmd(o),
		newAddModelCmd(o),
		newModelsCmd(o),
		newRemoveModelCmd(o),
		newModelConfigCmd(o),
		newSwitchCmd(o),
		newDemoCmd(),
	)
}
