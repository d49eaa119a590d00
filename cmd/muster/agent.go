package main

import (
	"log/slog"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/spf13/cobra"
)

func newAgentCmd() *cobra.Command {
	var path, logFormat string
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run the machine agent: log in to the controller and report this machine started",
		Long: `Run the machine agent of an instance. It logs in to the controller with the
machine id, password and nonce of FILE (JSON or YAML, written by the
provisioner), reports the machine started with its hardware and addresses,
and heartbeats until SIGINT or SIGTERM. It exits with status 1 when the
controller refuses its password, or keeps refusing its nonce for a minute.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usageErrorf("--config FILE is required")
			}
			logger, err := newLogger(cmd.ErrOrStderr(), logFormat, slog.LevelInfo)
			if err != nil {
				return err
			}
			cfg, err := agent.LoadConfig(path)
			if err != nil {
				return err
			}
			return agent.Run(cmd.Context(), cfg, agent.Options{Logger: logger,
				OnEnrolled: func(c muster.AgentConfig) error { return agent.SaveConfig(path, c) }})
		},
	}
	f := cmd.Flags()
	// This --config shadows the global client config flag.
	f.StringVar(&path, "config", "", "agent config file (JSON or YAML)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}
