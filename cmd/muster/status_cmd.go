package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
)

// writeStatus prints st in format (table, json or yaml).
func writeStatus(w io.Writer, st api.Status, format string, wide bool) error {
	switch format {
	case "table":
		return api.WriteStatusTable(w, st, wide)
	case "json":
		return api.WriteStatusJSON(w, st)
	}
	return api.WriteAs(w, format, st.Script(), nil, nil)
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
			if os.Getenv("GOGC") == "" { // a big status is decoded once: collect less often (100k machines: 1.5 s -> 1.1 s, same peak)
				debug.SetGCPercent(400)
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			if format == "wide" { // kubectl's -o wide
				format, wide = "table", true
			}
			write := func(w io.Writer, st api.Status) error { return writeStatus(w, st, format, wide) }
			if !watch {
				st, err := c.StatusOf(ctx, model, ids)
				if err != nil {
					return err
				}
				return write(cmd.OutOrStdout(), st)
			}
			return c.WatchStatus(ctx, model, ids, cmd.OutOrStdout(), format == "table", write)
		},
	}
	formatFlag(cmd, &format, append(api.Formats, "wide")...)
	cmd.Flags().BoolVar(&watch, "watch", false, "print the status again on every change, until interrupted")
	cmd.Flags().BoolVar(&wide, "wide", false, "show ids and messages in full")
	return cmd
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
				rows = append(rows, []string{z.Name, yesNo(z.Available), strconv.Itoa(z.Machines), z.BlockedText()})
			}
			return api.WriteAs(cmd.OutOrStdout(), format, zs, []string{"Zone", "Available", "Machines", "Out of capacity for (until)"}, rows)
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
				} else if err := json.NewEncoder(w).Encode(msg.Event); err != nil { // one object a line
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
