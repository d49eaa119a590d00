package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
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
settings (e.g. harvest-mode=all). The global --config FILE still names
the client config file when FILE exists; any other value must be
key=value.`,
		Example: `  muster add-model staging --provider sim --config zones=a,b,c
  muster add-model web --provider docker
  muster add-model aws --provider ec2 --config region=eu-west-1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if provider == "" {
				return usageErrorf("no provider: give --provider")
			}
			if err := muster.CheckName(args[0]); err != nil {
				return usageErrorf("bad model name %q: %v", args[0], muster.ErrorMessage(err))
			}
			// add-model's own --config (k=v) shadows the global --config
			// FILE: a value naming an existing file is the client config.
			var kvs []string
			for _, v := range config {
				if fi, err := os.Stat(v); err != nil || !fi.Mode().IsRegular() {
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
	cmd.Flags().StringVar(&provider, "provider", "", "provider: sim, docker, ec2 or lxd")
	cmd.RegisterFlagCompletionFunc("provider", cobra.FixedCompletions([]string{"sim", "docker", "ec2", "lxd"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().StringArrayVar(&config, "config", nil, "provider configuration or model setting key=value (repeatable)")
	return cmd
}

func newModelsCmd(o *globalOptions) *cobra.Command {
	var format string
	cmd := &cobra.Command{
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
			header, rows := api.ModelsTable(ms, current)
			return api.WriteAs(cmd.OutOrStdout(), format, ms, header, rows)
		},
	}
	formatFlag(cmd, &format, api.Formats...)
	return cmd
}

func newRemoveModelCmd(o *globalOptions) *cobra.Command {
	var force, yes, keep bool
	cmd := &cobra.Command{
		Use:   "remove-model NAME",
		Short: "Remove a model; --force removes its machines first",
		Long: `Remove a model that has no machines. With --force its machines are made
dead at once, their instances stopped (unless --keep-instance) and the
model removed once they are gone; it asks first unless --yes.`,
		Example: `  muster remove-model staging
  muster remove-model staging --force --yes`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeModels(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keep && !force {
				return usageErrorf("--keep-instance goes with --force")
			}
			ctx := cmd.Context()
			c, _, err := o.connect(ctx)
			if err != nil {
				return err
			}
			if !force {
				return c.RemoveModel(ctx, args[0])
			}
			if !yes && !confirm(cmd, fmt.Sprintf("Remove model %s and every machine in it", args[0])) {
				return fmt.Errorf("not removed: not confirmed (--yes confirms)")
			}
			return c.RemoveModelForce(ctx, args[0], keep, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove the model's machines first")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&keep, "keep-instance", false, "with --force, leave the machines' instances running")
	return cmd
}

// confirm asks a yes/no question on the command's input.
func confirm(cmd *cobra.Command, question string) bool {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s? (y/N): ", question)
	answer, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "y" || answer == "yes"
}

func newSwitchCmd(o *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "switch [MODEL]",
		Short: "Make MODEL the one commands act on; without it, print the current model",
		Long: `Make MODEL the model commands act on when neither -m nor MUSTER_MODEL
says otherwise, by recording it in the client config file (as juju
switch and kubectl config use-context do); without MODEL, print the
current model.`,
		Example: `  muster switch staging
  muster switch`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeModels(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := o.configPath()
			if err != nil {
				return err
			}
			cc, err := controller.LoadClientConfig(path)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), o.modelName(cc))
				return nil
			}
			ctx := cmd.Context()
			c, err := dialControllers(ctx, cc)
			if err != nil {
				return err
			}
			m, err := c.Model(ctx, args[0])
			if err != nil {
				return err
			}
			from := o.modelName(cc)
			cc.Model = m.Name
			if err := cc.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s -> %s\n", from, m.Name)
			if env := os.Getenv("MUSTER_MODEL"); env != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: MUSTER_MODEL=%s still overrides it\n", env)
			}
			return nil
		},
	}
}

func newModelConfigCmd(o *globalOptions) *cobra.Command {
	var (
		format string
		reset  []string
	)
	cmd := &cobra.Command{
		Use:   "model-config [KEY | KEY=VALUE... | --reset KEY,...]",
		Short: "Show or change the model's settings",
		Long: `Show or change the model's settings: with no arguments every key and value,
with KEY its value, with KEY=VALUE... set them, with --reset KEY,... put
them back to their defaults (all or none).

Keys: ` + strings.Join(settingKeyNames(), ", ") + `.`,
		Example: `  muster model-config retry-count=5 harvest-mode=all
  muster model-config --reset retry-count,harvest-mode`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var set map[string]string
			get := ""
			switch {
			case len(reset) > 0 && len(args) > 0:
				return usageErrorf("give KEY=VALUE... or --reset, not both")
			case len(reset) > 0:
				set = map[string]string{}
				for _, k := range reset {
					i := slices.IndexFunc(muster.SettingKeys, func(s muster.SettingKey) bool { return s.Name == k })
					if i < 0 {
						return usageErrorf("bad --reset %q: no such setting (known: %s)", k, strings.Join(settingKeyNames(), ", "))
					}
					set[k] = muster.SettingKeys[i].Default
				}
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
			header, rows := api.SettingsTable(cfg)
			return api.WriteAs(w, format, cfg, header, rows)
		},
	}
	formatFlag(cmd, &format, api.Formats...)
	cmd.Flags().StringSliceVar(&reset, "reset", nil, "put these settings back to their defaults (comma-separated)")
	cmd.RegisterFlagCompletionFunc("reset", cobra.FixedCompletions(settingKeyNames(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// settingKeyNames lists the model-config keys.
func settingKeyNames() []string {
	var out []string
	for _, k := range muster.SettingKeys {
		out = append(out, k.Name)
	}
	return out
}
