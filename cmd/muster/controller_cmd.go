package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/internal/logthrottle"
	"github.com/spf13/cobra"
)

// providers are the provider kinds models may use (DESIGN §1: chosen
// here, not registered in init).
var providers = map[string]controller.ProviderKind{
	"sim":    controller.Sim,
	"ec2":    controller.EC2,
	"docker": controller.Docker,
	"lxd":    controller.LXD,
}

func defaultDataDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ".muster"
	}
	return filepath.Join(home, ".local", "share", "muster")
}

// newLogger returns a slog logger writing to w in the given format.
// Repeated warnings and errors are summarised (logthrottle), so a failure
// that repeats thousands of times stays readable.
func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, usageErrorf("bad --log-format %q: want text or json", format)
	}
	return slog.New(logthrottle.New(h, logthrottle.Options{})), nil
}

func newControllerCmd() *cobra.Command {
	cfg := controller.Config{Providers: providers}
	var logFormat string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the muster controller: state store, HTTPS API and one provisioner per model",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(os.Stderr, logFormat, slog.LevelInfo)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			cfg.WriteUserConfig = true
			ctx := cmd.Context()
			c, err := controller.Open(ctx, cfg)
			if err != nil {
				return err
			}
			if c.ClientConfigWritten() {
				fmt.Fprintf(cmd.OutOrStdout(), "controller listening on %s\nclient config: %s\n", c.URL(), c.ClientConfigPath())
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "controller listening on %s\nclient config: none in the data dir; use the first controller's client config (the CLI learns this address from it), restart with --client-config FILE, or make a new admin token with `muster controller admin-token --data-dir %s` while the controller is stopped\n", c.URL(), cfg.DataDir)
			}
			<-ctx.Done()
			logger.Info("stopping controller")
			stopCtx, cancel := context.WithTimeout(context.Background(), controller.StopTimeout)
			defer cancel()
			return c.Close(stopCtx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "directory for the state, CA and client config")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:17070", "address of the HTTPS API")
	f.StringVar(&cfg.StoreURL, "store", "", "state store URL (default sqlite://<data-dir>/muster.db; postgres://… for PostgreSQL)")
	f.StringVar(&cfg.APIAddress, "api-address", "", "host:port clients and other controllers' clients reach this controller at (default: the --listen address)")
	f.StringVar(&cfg.ClientConfigFrom, "client-config", "", "a client config of the controllers this one joins: copied to <data-dir>/client.yaml with this controller's URL")
	f.StringVar(&cfg.DefaultSimEndpoint, "default-sim-endpoint", "", "`URL` of a 'muster sim serve' for a new default model (required for a default model on a PostgreSQL store)")
	f.StringVar(&cfg.CAKeyFile, "ca-key-file", "", "keep the CA's private key in this file (0600) instead of the store; give every controller of a PostgreSQL store the same file")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "", "host:port to serve Prometheus /metrics on without authentication, over plain HTTP (on the API port /metrics needs the admin token)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	cmd.AddCommand(newAdminTokenCmd())
	return cmd
}

func newAdminTokenCmd() *cobra.Command {
	var dataDir, store string
	cmd := &cobra.Command{
		Use:   "admin-token",
		Short: "Make a new admin token, revoke the old one, and write it to <data-dir>/client.yaml (the controller must be stopped)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := controller.ResetAdminToken(cmd.Context(), dataDir, store)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "new admin token written to %s; the old token is revoked\n", path)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "the controller's data dir")
	f.StringVar(&store, "store", "", "state store URL (default sqlite://<data-dir>/muster.db)")
	return cmd
}
