package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
)

// maxFleetFile bounds the size of a fleet file.
const maxFleetFile = 1 << 20

// readFleetFile reads and checks a fleet file ("-" is stdin).
func readFleetFile(path string, stdin io.Reader) (api.ApplyRequest, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return api.ApplyRequest{}, fmt.Errorf("read fleet file: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxFleetFile+1))
	if err != nil {
		return api.ApplyRequest{}, fmt.Errorf("read fleet file: %w", err)
	}
	if len(data) > maxFleetFile {
		return api.ApplyRequest{}, fmt.Errorf("fleet file %s is larger than %d bytes", path, maxFleetFile)
	}
	req, err := api.ParseFleet(data)
	if err != nil {
		return req, usageError{err}
	}
	return req, nil
}

// writePlan prints what an apply does or would do, one line per group.
func writePlan(w io.Writer, res api.ApplyResult) {
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "Group\tHave\tWant\tAdd\tRemove")
	for _, g := range res.Groups {
		rm := "-"
		if len(g.Remove) > 0 {
			rm = strings.Join(g.Remove, ",")
		}
		add := fmt.Sprint(g.Add)
		if len(g.Added) > 0 {
			add += " (" + strings.Join(g.Added, ",") + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", g.Name, g.Have, g.Want, add, rm)
	}
	tw.Flush()
	fmt.Fprint(w, res.DriftLines())
	if res.DryRun {
		fmt.Fprintln(w, "dry run: nothing changed")
	}
}

// applyGoals are the waits of an applied plan: added machines provisioned,
// removed ones gone.
func applyGoals(res api.ApplyResult) map[string]api.Goal {
	goals := map[string]api.Goal{}
	for _, g := range res.Groups {
		for _, id := range g.Added {
			goals[id] = api.Provisioned
		}
		for _, id := range g.Remove {
			goals[id] = api.Removed
		}
	}
	return goals
}

// applyFleet applies the fleet of req and, with wait, waits for it showing progress on
// progressW.
func applyFleet(ctx context.Context, c *api.Client, model string, req api.ApplyRequest, dryRun, wait bool, out, progressW io.Writer) error {
	req.DryRun = dryRun
	res, err := c.Apply(ctx, model, req)
	if err != nil {
		return err
	}
	writePlan(out, res)
	if dryRun || !wait {
		return nil
	}
	failures, err := c.WaitShowing(ctx, model, applyGoals(res), progressW, "applying", false)
	if err != nil {
		return err
	}
	return api.FailureError(failures, 0)
}

func newApplyCmd(o *globalOptions) *cobra.Command {
	var (
		file                  string
		dryRun, wait, replace bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Converge the model to a fleet file: add missing machines, remove surplus ones",
		Long: `Converge the model to a YAML fleet file (- for stdin):

  groups:
    - name: web
      count: 6
      constraints: cores=2 mem=4G
      base: ubuntu@24.04
      storage: [data=10G]

Missing machines of a group are added and surplus ones removed (highest
ids first); groups not in the file are left alone. --dry-run prints the
plan and changes nothing; --wait waits until the fleet is provisioned. Drifted
machines (template changed) get the new template; --replace replaces them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("no fleet file: give -f FILE")
			}
			f, err := readFleetFile(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			f.Replace = replace
			return applyFleet(ctx, c, model, f, dryRun, wait, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "fleet file (- for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, change nothing")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the fleet is provisioned")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace drifted machines, launch before stop (rolling update)")
	return cmd
}
