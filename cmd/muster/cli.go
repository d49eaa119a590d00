package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
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

// newTabWriter aligns table output in columns.
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// printTable writes rows aligned with the header.
func printTable(w io.Writer, header []string, rows [][]string) error {
	tw := newTabWriter(w)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		writeRow(tw, r...)
	}
	return tw.Flush()
}

// writeRow writes one table row, each cell with its control characters
// escaped (S8): cells hold text agents and clouds wrote, and a tab or an
// escape sequence in one must not break the table or the terminal.
func writeRow(w io.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = muster.Printable(c)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printYAML writes v as YAML with the keys and key order of its JSON
// encoding (the API types carry JSON tags only).
func printYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	blockStyle(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// blockStyle turns JSON's flow style into YAML's block style, keeping empty
// lists and maps as [] and {}.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode {
		n.Style &^= yaml.DoubleQuotedStyle | yaml.FlowStyle
		return
	}
	if len(n.Content) > 0 {
		n.Style &^= yaml.FlowStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// checkFormat refuses a --format value outside allowed.
func checkFormat(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
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
		newDemoCmd(),
	)
}
