package main

import (
	"bytes"
	"context"
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
func writeStatus(w io.Writer, st api.Status, format string) error {
	switch format {
	case "json":
		return printJSON(w, st.Script())
	case "yaml":
		return printYAML(w, st.Script())
	}
	return writeStatusTable(w, st)
}

// writeStatusTable prints the model, its zones and its machines as tables.
func writeStatusTable(w io.Writer, st api.Status) error {
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "Model\tProvider\tHarvest\tMachines")
	writeRow(tw, st.Model, st.Provider, st.HarvestMode, strconv.Itoa(len(st.Machines)))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, kv := range [][2]string{{"provisioner", st.ProvisionerError}, {"harvest", st.HarvestBreaker}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "%s: %s\n", kv[0], muster.Printable(kv[1]))
		}
	}
	for _, r := range st.Remediation {
		fmt.Fprintln(w, r)
	}
	if len(st.Zones) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "Zone\tAvailable\tMachines")
		for _, name := range sortedKeys(st.Zones) {
			z := st.Zones[name]
			writeRow(tw, name, yesNo(z.Available), strconv.Itoa(z.Machines))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(st.Machines) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "Machine\tLife\tStatus\tInstance\tInst-status\tZone\tGroup\tBase\tConstraints\tAddress\tMessage")
	for _, id := range sortedIDs(st.Machines) {
		m := st.Machines[id]
		addr := ""
		if len(m.Addresses) > 0 {
			addr = m.Addresses[0]
		}
		msg := m.InstanceMessage
		if m.StatusMessage != "" {
			msg = m.StatusMessage
		}
		writeRow(tw, id, m.Life, dash(m.Status), dash(m.InstanceID),
			dash(m.InstanceStatus), dash(m.Zone), dash(m.Group), m.Base, dash(m.Constraints), dash(addr), msg)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newStatusCmd(o *globalOptions) *cobra.Command {
	var (
		format string
		watch  bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the model's machines and zones",
		Long: `Show the model's machines and zones.

--format json gives every key of every machine, always present; --watch
prints the status again on every change until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format, "table", "json", "yaml"); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, model, err := o.connect(ctx)
			if err != nil {
				return err
			}
			if !watch {
				st, err := c.Status(ctx, model)
				if err != nil {
					return err
				}
				return writeStatus(cmd.OutOrStdout(), st, format)
			}
			return watchStatus(ctx, c, model, cmd.OutOrStdout(), format)
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output format: table, json or yaml")
	cmd.Flags().BoolVar(&watch, "watch", false, "print the status again on every change, until interrupted")
	return cmd
}

// watchStatus redraws the status on every change notification until ctx
// ends: in place on a terminal, one after another otherwise.
func watchStatus(ctx context.Context, c *api.Client, model string, w io.Writer, format string) error {
	changes, err := c.WatchChanges(ctx, model)
	if err != nil {
		return err
	}
	tty := isTerminal(w)
	var last []byte
	for {
		st, err := c.Status(ctx, model)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var buf bytes.Buffer
		if err := writeStatus(&buf, st, format); err != nil {
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
	return &cobra.Command{
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
			return printTable(cmd.OutOrStdout(), []string{"Zone", "Available", "Machines", "Out of capacity for (until)"}, rows)
		},
	}
}

func newEventsCmd(o *globalOptions) *cobra.Command {
	var (
		machine string
		follow  bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the model's event log; --follow waits for more",
		Args:  cobra.NoArgs,
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
				for _, e := range es {
					writeEvent(w, e)
				}
				return nil
			}
			s, err := c.FollowEvents(ctx, model, api.FollowOptions{Machine: machine, Reconnect: true})
			if err != nil {
				return err
			}
			for msg := range s.C() {
				if msg.Event != nil {
					writeEvent(w, *msg.Event)
				}
			}
			if ctx.Err() != nil {
				return nil
			}
			return s.Err()
		},
	}
	cmd.Flags().StringVar(&machine, "machine", "", "only this machine's events")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new events until interrupted")
	return cmd
}

// writeEvent prints one event on a line.
func writeEvent(w io.Writer, e api.EventInfo) {
	m := e.Machine
	if m == "" {
		m = "-"
	} else {
		m = "machine-" + m
	}
	fmt.Fprintf(w, "%s  %-6d %-10s %-20s %-10s %s\n", e.Time.UTC().Format(time.RFC3339), e.Seq, muster.Printable(m),
		muster.Printable(e.Kind), muster.Printable(e.Actor), muster.Printable(strings.TrimSpace(e.Message)))
}
