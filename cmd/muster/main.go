// Command muster is the muster controller, its command-line client, the
// machine agent and a simulated cloud, in one binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/musterhq/muster"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError marks errors in how a command was called: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// run executes one muster command line and returns the exit status: 0, 1 for
// errors, 2 for usage errors. Errors are printed as one line "error: ...".
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "error: %s\n", userError(err))
	return exitCode(err, isClientCmd(cmd))
}

// exitCode is 2 for every usage error: a bad command line and, for client
// commands, any input refused as invalid, whether the CLI or the
// controller found it; 1 for everything else (a controller's, an agent's
// bad file or store is not how it was called).
func exitCode(err error, client bool) int {
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) || (client && muster.ErrorCode(err) == muster.EInvalid) {
		return 2
	}
	return 1
}

// isClientCmd says whether cmd talks to a controller (see
// withoutClientFlags).
func isClientCmd(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Annotations["local"] != "" {
			return false
		}
	}
	return true
}

// userError is err as one printable line.
func userError(err error) string { return printableError(oneLine(errorText(err))) }

// withoutClientFlags marks c (and its subcommands) as not talking to a
// controller, and hides the client's global flags from their help.
func withoutClientFlags(c *cobra.Command) *cobra.Command {
	c.Annotations = map[string]string{"local": "no client config or model"}
	c.SetHelpFunc(func(c *cobra.Command, args []string) {
		for _, n := range []string{"config", "model"} {
			c.Root().PersistentFlags().Lookup(n).Hidden = true
		}
		c.Root().HelpFunc()(c, args)
	})
	return c
}

// errorText is the text of an error for users: refusals name their code
// ("unauthorized: invalid token") so that scripts and people see why.
func errorText(err error) string {
	msg := suggestion(err.Error())
	var me *muster.Error
	if errors.As(err, &me) {
		switch me.Code {
		case muster.EUnauthorized, muster.ENotProvisioned, muster.EForbidden:
			if !strings.Contains(msg, me.Code) {
				msg = me.Code + ": " + msg
			}
		}
	}
	return msg
}

// printableError escapes the control characters of an error message,
// which may quote what agents or clouds wrote (S8). A message without any
// is left as it is: the backslashes of a value the server quoted with %q
// are not doubled.
func printableError(s string) string {
	if bare := strings.ReplaceAll(s, `\`, ""); muster.Printable(bare) == bare {
		return s
	}
	return muster.Printable(s)
}

func oneLine(s string) string {
	out := []rune{}
	for _, r := range s {
		if r == '\n' || r == '\r' {
			r = ' '
		}
		out = append(out, r)
	}
	return string(out)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "muster",
		Short: "muster keeps cloud instances in step with the machines you declare",
		Long: `muster keeps cloud instances in step with the machines you declare.

Start with 'muster demo', or 'muster controller' and then 'muster add-machine'.
Client commands find the controller through the client config file
(--config, else $MUSTER_CONFIG, else ~/.config/muster/client.yaml) and act
on a model (-m, else $MUSTER_MODEL, else the one 'muster switch' chose).`,
		Version:       muster.BuildInfo().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("muster {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	o := &globalOptions{}
	pf := root.PersistentFlags()
	pf.StringVar(&o.config, "config", "", "client config file (default $MUSTER_CONFIG, else ~/.config/muster/client.yaml)")
	pf.StringVarP(&o.model, "model", "m", "", "model to act on (default $MUSTER_MODEL, else the config's model, else default)")
	root.RegisterFlagCompletionFunc("model", completeModels(o))
	root.AddCommand(newVersionCmd(o), newSimCmd(o), newDashboardCmd(o))
	// Commands that do not talk to a controller: --config and -m are not
	// theirs, and their help does not list them.
	for _, c := range []*cobra.Command{newControllerCmd(), newAgentCmd(), newAgentBinariesCmd(), newLXDCmd()} {
		root.AddCommand(withoutClientFlags(c))
	}
	addClientCmds(root, o)
	return root
}
