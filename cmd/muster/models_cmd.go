package main

import (
	"fmt"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
)

// parseKeyValues parses k=v arguments; keys must be unique.
func parseKeyValues(what string, args []string) (map[string]string, error) {
	out := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, usageErrorf("bad %s %q: want key=value", what, a)
		}
		if _, dup := out[k]; dup {
			return nil, usageErrorf("%s key %q given twice", what, k)
		}
		out[k] = v
	}
	return out, nil
}

func newAddModelCmd(o *globalOptions) *cobra.Command {
	var (
		provider string
		config   []string
	)
	cmd := &cobra.Command{
		Use:   "add-model NAME --provider P [--config k=v]...",
		Short: "Add a model with its provider configuration",
		Long: `Add a model. --config sets provider configuration (e.g. endpoint=http://ADDR
for a sim served by 'muster sim serve', zones=a,b,c) and model-config
settings (e.g. harvest-mode=all). A --config value without "=", or with a
"/" before its "=", names the client config file, as the global --config
does elsewhere.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if provider == "" {
				return usageErrorf("no provider: give --provider")
			}
			if err := muster.CheckName(args[0]); err != nil {
				return usageErrorf("bad model name %q: %v", args[0], muster.ErrorMessage(err))
			}
			// add-model's own --config (k=v) shadows the global --config
			// FILE; a value without "=" is taken as the client config file.
			var kvs []string
			for _, v := range config {
				if k, _, ok := strings.Cut(v, "="); ok && !strings.Contains(k, "/") {
					kvs = append(kvs, v)
					continue
				}
				if o.config != "" {
					return usageErrorf("bad --config %q: want key=value (the client config file is already %s)", v, o.config)
				}
				o.config = v
			}
			cfg, err := parseKeyValues("--config", kvs)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, _, err := o.connect(ctx)
			if err != nil {
				return err
			}
			m, err := c.AddModel(ctx, api.AddModelRequest{Name: args[0], Provider: provider, Config: cfg})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added model %s (%s)\n", m.Name, m.UUID)
			return nil
		},
	}
	cmd.Flags().StringVar(&provider, "provider", "", "provider: sim, docker, ...")
	cmd.Flags().StringArrayVar(&config, "config", nil, "provider configuration or model setting key=value (repeatable)")
	return cmd
}

func newModelsCmd(o *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "models",
		Short: "List the models; * marks the current one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, current, err := o.connect(ctx)
			if err != nil {
				return err
			}
			ms, err := c.Models(ctx)
			if err != nil {
				return err
			}
			var rows [][]string
			for _, m := range ms {
				name := m.Name
				if m.Name == current || m.UUID == current {
					name += "*"
				}
				var cfg []string
				for _, k := range sortedKeys(m.Config) {
					cfg = append(cfg, k+"="+m.Config[k])
				}
				rows = append(rows, []string{name, m.Provider, dash(strings.Join(cfg, " ")), m.UUID})
			}
			return printTable(cmd.OutOrStdout(), []string{"Model", "Provider", "Config", "UUID"}, rows)
		},
	}
}

func newRemoveModelCmd(o *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-model NAME",
		Short: "Remove a model that has no machines",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, _, err := o.connect(ctx)
			if err != nil {
				return err
			}
			return c.RemoveModel(ctx, args[0])
		},
	}
}

func newModelConfigCmd(o *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "model-config [KEY | KEY=VALUE...]",
		Short: "Show or change the model's settings",
		Long: `Show or change the model's settings: with no arguments every key and value,
with KEY its value, with KEY=VALUE... set them (all or none).

Keys: ` + strings.Join(settingKeyNames(), ", ") + `.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var set map[string]string
			get := ""
			switch {
			case len(args) == 1 && !strings.Contains(args[0], "="):
				get = args[0]
			case len(args) > 0:
				var err error
				if set, err = parseKeyValues("setting", args); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if set != nil {
				_, err := c.SetModelConfig(ctx, model, set)
				return err
			}
			cfg, err := c.ModelConfig(ctx, model)
			if err != nil {
				return err
			}
			if get != "" {
				v, ok := cfg[get]
				if !ok {
					return muster.Errorf(muster.ENotFound, "no setting %q (known: %s)", get, strings.Join(sortedKeys(cfg), ", "))
				}
				fmt.Fprintln(w, v)
				return nil
			}
			// Known keys in display order, then any others.
			var rows [][]string
			shown := map[string]bool{}
			for _, k := range append(settingKeyNames(), sortedKeys(cfg)...) {
				if v, ok := cfg[k]; ok && !shown[k] {
					shown[k] = true
					rows = append(rows, []string{k, v})
				}
			}
			return printTable(w, []string{"Key", "Value"}, rows)
		},
	}
}

// settingKeyNames lists the model-config keys.
func settingKeyNames() []string {
	var out []string
	for _, k := range muster.SettingKeys {
		out = append(out, k.Name)
	}
	return out
}
