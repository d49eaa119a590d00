package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// writeStatus prints st in format (table, json or yaml).
func writeStatus(w io.Writer, st api.Status, format string, wide bool) error {
	if format == "table" {
		return api.WriteStatusTable(w, st, wide)
	}
	return api.WriteAs(w, format, st.Script(), nil, nil)
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newStatusCmd(o *globalOptions) *cobra.Command {
	var (
		format      string
		watch, wide bool
	)
	cmd := &cobra.Command{
		Use:   "status [ID...]",
		Short: "Show the model's machines and zones, or only the machines given",
		Long: `Show the model's machines and zones, or only the machines given.

--format json gives every key of every machine, always present; --watch
prints the status again on every change until interrupted; long instance
ids and messages are cut short unless --wide.`,
		Example: `  muster status
  muster status -o json 0 1
  muster status -m staging --watch`,
		ValidArgsFunction: completeMachineIDs(o),
		RunE: func(cmd *cobra.Command, ids []string) error {
			if err := checkMachineIDs(ids); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			read := func() (api.Status, error) { return machinesStatus(ctx, c, model, ids) }
			if !watch {
				st, err := read()
				if err != nil {
					return err
				}
				return writeStatus(cmd.OutOrStdout(), st, format, wide)
			}
			return watchStatus(ctx, c, model, read, cmd.OutOrStdout(), format, wide)
		},
	}
	formatFlag(cmd, &format, api.Formats...)
	cmd.Flags().BoolVar(&watch, "watch", false, "print the status again on every change, until interrupted")
	cmd.Flags().BoolVar(&wide, "wide", false, "show ids and messages in full")
	return cmd
}

// machinesStatus is the model's status, or only that of ids (as juju
// status 5), refusing ids the model does not have.
func machinesStatus(ctx context.Context, c *api.Client, model string, ids []string) (api.Status, error) {
	if len(ids) == 0 {
		return c.Status(ctx, model)
	}
	st, err := c.MachinesStatus(ctx, model, ids)
	if err != nil {
		return st, err
	}
	var missing []string
	for _, id := range ids {
		if _, ok := st.Machines[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return st, muster.Errorf(muster.ENotFound, "no machine %s in model %q", strings.Join(missing, ", "), model)
	}
	return st, nil
}

// watchStatus redraws the status on every change notification until ctx
// ends: in place on a terminal, one after another otherwise.
func watchStatus(ctx context.Context, c *api.Client, model string, read func() (api.Status, error), w io.Writer, format string, wide bool) error {
	changes, err := c.WatchChanges(ctx, model)
	if err != nil {
		return err
	}
	tty := isTerminal(w)
	var last []byte
	for {
		st, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var buf bytes.Buffer
		if err := writeStatus(&buf, st, format, wide); err != nil {
			return err
		}
		if !bytes.Equal(buf.Bytes(), last) {
			last = buf.Bytes()
			if tty {
				fmt.Fprint(w, "\033[H\033[2J")
				fmt.Fprintf(w, "%s  (every change; Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly))
			} else if format == "table" {
				fmt.Fprintf(w, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
			}
			w.Write(buf.Bytes())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(api.MinRefresh):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		}
	}
}

func newZonesCmd(o *globalOptions) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "zones",
		Short: "List the model's zones with availability and machine counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			zs, err := c.Zones(ctx, model)
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(zs))
			for _, z := range zs {
				rows = append(rows, []string{z.Name, yesNo(z.Available), strconv.Itoa(z.Machines)})
			}
			return api.WriteAs(cmd.OutOrStdout(), format, zs, []string{"Zone", "Available", "Machines"}, rows)
		},
	}
	formatFlag(cmd, &format, api.Formats...)
	return cmd
}

func newEventsCmd(o *globalOptions) *cobra.Command {
	var (
		machine, format string
		follow, wide    bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the model's event log; --follow waits for more",
		Example: `  muster events --machine 3
  muster events --follow -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if machine != "" {
				if err := checkMachineIDs([]string{machine}); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if !follow {
				es, err := c.Events(ctx, model, api.EventQuery{Machine: machine})
				if err != nil {
					return err
				}
				if len(es) == 0 && machine != "" {
					// No events: is there such a machine (as show-machine)?
					if _, err := c.Machine(ctx, model, machine); err != nil {
						return err
					}
				}
				header, rows := api.EventsTable(es, wide)
				return api.WriteAs(w, format, es, header, rows)
			}
			s, err := c.FollowEvents(ctx, model, api.FollowOptions{Machine: machine, Reconnect: true})
			if err != nil {
				return err
			}
			for msg := range s.C() {
				if msg.Event == nil {
					continue
				}
				if format == "table" {
					fmt.Fprintln(w, api.EventLine(*msg.Event, wide))
				} else if err := printJSONLine(w, msg.Event); err != nil {
					return err
				}
			}
			if ctx.Err() != nil {
				return nil
			}
			return s.Err()
		},
	}
	cmd.Flags().StringVar(&machine, "machine", "", "only this machine's events")
	cmd.RegisterFlagCompletionFunc("machine", completeMachineIDs(o))
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new events until interrupted (json: one object a line)")
	cmd.Flags().BoolVar(&wide, "wide", false, "show messages in full")
	formatFlag(cmd, &format, "table", "json")
	return cmd
}

// printJSONLine writes v as JSON on one line.
func printJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
