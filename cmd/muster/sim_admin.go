package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/sim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// simTarget is the sim a `muster sim …` command acts on: the model's
// embedded sim through the controller, or a `muster sim serve` at
// --endpoint.
type simTarget struct {
	o        *globalOptions
	endpoint string
}

func (t *simTarget) addFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&t.endpoint, "endpoint", "", "act on the sim served at this URL (muster sim serve) instead of the model's embedded sim")
}

// client returns the sim's admin client.
func (t *simTarget) client(ctx context.Context) (*sim.Client, error) {
	if t.endpoint != "" {
		if !strings.HasPrefix(t.endpoint, "http://") && !strings.HasPrefix(t.endpoint, "https://") {
			return nil, usageErrorf("bad --endpoint %q: want http://HOST:PORT", t.endpoint)
		}
		return sim.NewClient(t.endpoint, nil), nil
	}
	c, model, err := t.o.connect(ctx)
	if err != nil {
		return nil, err
	}
	return sim.NewClient(c.SimURL(model), c.HTTPClient()), nil
}

func newSimZonesCmd(o *globalOptions) *cobra.Command {
	t := &simTarget{o: o}
	var format string
	cmd := &cobra.Command{
		Use:   "zones",
		Short: "List the sim's zones with capacity and use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			sc, err := t.client(ctx)
			if err != nil {
				return err
			}
			zs, err := sc.Zones(ctx)
			if err != nil {
				return err
			}
			return writeSimZones(cmd.OutOrStdout(), zs, format)
		},
	}
	formatFlag(cmd, &format, api.Formats...)
	t.addFlag(cmd)
	return cmd
}

func writeSimZones(w io.Writer, zs []sim.ZoneState, format string) error {
	var rows [][]string
	for _, z := range zs {
		rows = append(rows, []string{z.Name, yesNo(z.Available), capacityText(z.Capacity), strconv.Itoa(z.Used),
			strconv.Itoa(z.Instances), strconv.Itoa(z.FailNext), strconv.FormatFloat(z.ErrorRate, 'g', -1, 64)})
	}
	return api.WriteAs(w, format, zs, []string{"Zone", "Available", "Capacity", "Used", "Instances", "Fail-next", "Error-rate"}, rows)
}

func capacityText(c int) string {
	if c == sim.Unlimited {
		return "unlimited"
	}
	return strconv.Itoa(c)
}

func newSimSetZoneCmd(o *globalOptions) *cobra.Command {
	t := &simTarget{o: o}
	var (
		available, add bool
		capacity       string
	)
	cmd := &cobra.Command{
		Use:   "set-zone NAME [--available=BOOL] [--capacity CORES] [--add]",
		Short: "Change a sim zone (or add it, with --add)",
		Long: `Change a sim zone's availability or capacity in cores (a number, or
"unlimited"); with --add a zone that does not exist is added.`,
		Example: `  muster sim set-zone b --available=false
  muster sim set-zone d --add --capacity 16`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := muster.CheckName(args[0]); err != nil {
				return usageErrorf("bad zone name %q: %v", args[0], muster.ErrorMessage(err))
			}
			var u sim.ZoneUpdate
			if cmd.Flags().Changed("available") {
				u.Available = &available
			}
			if cmd.Flags().Changed("capacity") {
				n := sim.Unlimited
				if capacity != "unlimited" {
					var err error
					n, err = strconv.Atoi(capacity)
					if err != nil || n < 0 {
						return usageErrorf("bad --capacity %q: want a number of cores or unlimited", capacity)
					}
				}
				u.Capacity = &n
			}
			ctx := cmd.Context()
			sc, err := t.client(ctx)
			if err != nil {
				return err
			}
			if !add {
				if err := checkSimZone(ctx, sc, args[0], "; --add adds it"); err != nil {
					return err
				}
			}
			z, err := sc.SetZone(ctx, args[0], u)
			if err != nil {
				return err
			}
			return writeSimZones(cmd.OutOrStdout(), []sim.ZoneState{z}, "table")
		},
	}
	cmd.Flags().BoolVar(&available, "available", true, "whether the zone is available")
	cmd.Flags().StringVar(&capacity, "capacity", "", "capacity in cores, or unlimited")
	cmd.Flags().BoolVar(&add, "add", false, "add the zone if it does not exist")
	t.addFlag(cmd)
	return cmd
}

// setIf points *dst at v when the flag was given.
func setIf[T any](fl interface{ Changed(string) bool }, name string, dst **T, v *T) {
	if fl.Changed(name) {
		*dst = v
	}
}

// checkSimZone refuses a zone the sim does not have, naming those it has.
func checkSimZone(ctx context.Context, sc *sim.Client, zone, hint string) error {
	zs, err := sc.Zones(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, z := range zs {
		if z.Name == zone {
			return nil
		}
		names = append(names, z.Name)
	}
	return muster.Errorf(muster.ENotFound, "sim has no zone %q (zones: %s)%s", zone, strings.Join(names, ", "), hint)
}

// parseRate parses BURST/PER_S, e.g. 10/50.
func parseRate(s string) (sim.Bucket, error) {
	b, p, ok := strings.Cut(s, "/")
	burst, err1 := strconv.Atoi(b)
	per, err2 := strconv.ParseFloat(p, 64)
	if !ok || err1 != nil || err2 != nil || burst < 0 || per < 0 || (burst > 0 && per == 0) {
		return sim.Bucket{}, usageErrorf("bad --rate-limit %q: want BURST/PER_SECOND, e.g. 10/50 (0/0 for none)", s)
	}
	return sim.Bucket{Burst: burst, PerSecond: per}, nil
}

// changed returns v when the flag was given, else nil.
func changed[T any](fl *pflag.FlagSet, name string, v *T) *T {
	if fl.Changed(name) {
		return v
	}
	return nil
}

func newSimFaultsCmd(o *globalOptions) *cobra.Command {
	t := &simTarget{o: o}
	var (
		errRate  float64
		failNext int
		zone     string
		latency  time.Duration
		rate     string
		clear    bool

		listingLag, replyDelay  time.Duration
		loseReplies, quotaVCPUs int
		bootFail                float64
		stopAgent               string
	)
	cmd := &cobra.Command{
		Use:     "faults",
		Aliases: []string{"agents"}, // muster sim agents --boot-failure-rate F --stop ID
		Short:   "Show or script the sim's faults, simulated agents included",
		Long: `Show the sim's faults, or change them:

  --clear                 remove every fault (applied first)
  --start-error-rate F    probability 0..1 that a start fails (in --zone Z only, if given)
  --fail-next N --zone Z  the next N starts in zone Z fail with a capacity error
  --latency D             every call takes D (e.g. 50ms; 0 for none)
  --rate-limit B/P        a request bucket of burst B refilled at P per second
                          for every call kind (0/0 for none)
  --listing-lag D         a new instance is listed only D after its start
  --reply-delay D         a start's reply is held D after the cloud acted
  --lose-replies N        the next N starts act, then lose their reply (the
                          client sees a broken connection and retries: with
                          the same idempotency token it gets the same instance)
  --quota-vcpus N         the region's vCPU quota: a start beyond it fails
                          with a quota error in every zone (0 for none)
  --agent-boot-failure-rate F  probability 0..1 that a new instance's
                          simulated agent never boots (--boot-failure-rate)
  --stop-agent ID         that instance's agent stops heartbeating (--stop)

` + "`muster sim agents`" + ` is this command.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			edit := sim.FaultEdit{Clear: clear, Zone: zone}
			setIf(fl, "start-error-rate", &edit.StartErrorRate, &errRate)
			setIf(fl, "fail-next", &edit.FailNext, &failNext)
			setIf(fl, "latency", &edit.Latency, &latency)
			setIf(fl, "listing-lag", &edit.ListingLag, &listingLag)
			setIf(fl, "reply-delay", &edit.ReplyDelay, &replyDelay)
			setIf(fl, "lose-replies", &edit.LoseReplies, &loseReplies)
			setIf(fl, "quota-vcpus", &edit.QuotaVCPUs, &quotaVCPUs)
			setIf(fl, "agent-boot-failure-rate", &edit.AgentBootFailureRate, &bootFail)
			if fl.Changed("rate-limit") {
				bucket, err := parseRate(rate)
				if err != nil {
					return err
				}
				edit.RateLimit = &bucket
			}
			if err := edit.Check(); err != nil {
				return usageErrorf("%s", muster.ErrorMessage(err))
			}
			ctx := cmd.Context()
			sc, err := t.client(ctx)
			if err != nil {
				return err
			}
			if zone != "" {
				// Refuse an unknown zone before changing anything.
				if err := checkSimZone(ctx, sc, zone, ""); err != nil {
					return err
				}
			}
			if edit.ChangesFaults() {
				f, err := sc.Faults(ctx)
				if err != nil {
					return err
				}
				if err := sc.SetFaults(ctx, edit.Apply(f)); err != nil {
					return err
				}
			}
			if edit.FailNext != nil {
				if err := sc.FailNext(ctx, zone, failNext); err != nil {
					return err
				}
			}
			if stopAgent != "" {
				if err := sc.StopAgent(ctx, stopAgent); err != nil {
					return err
				}
			}
			f, err := sc.Faults(ctx)
			if err != nil {
				return err
			}
			tw := newTabWriter(cmd.OutOrStdout())
			for _, l := range f.Summary() {
				fmt.Fprintf(tw, "%s:\t%s\n", l[0], l[1])
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&errRate, "start-error-rate", 0, "probability 0..1 that a start fails")
	fl.IntVar(&failNext, "fail-next", 0, "the next N starts in --zone fail with a capacity error")
	fl.StringVar(&zone, "zone", "", "zone for --fail-next and --start-error-rate")
	fl.DurationVar(&latency, "latency", 0, "latency of every call")
	fl.StringVar(&rate, "rate-limit", "", "request bucket BURST/PER_SECOND for every call kind")
	fl.BoolVar(&clear, "clear", false, "remove every fault first")
	fl.DurationVar(&listingLag, "listing-lag", 0, "how long a new instance stays out of listings")
	fl.DurationVar(&replyDelay, "reply-delay", 0, "how long a start's reply is held after the cloud acted")
	fl.IntVar(&loseReplies, "lose-replies", 0, "the next N starts act, then lose their reply")
	fl.IntVar(&quotaVCPUs, "quota-vcpus", 0, "the region's vCPU quota: starts beyond it fail with a quota error (0 for none)")
	fl.Float64Var(&bootFail, "agent-boot-failure-rate", 0, "probability 0..1 that a new instance's simulated agent never boots")
	fl.StringVar(&stopAgent, "stop-agent", "", "stop the simulated agent of this instance (it stops heartbeating)")
	fl.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		switch name { // the names `muster sim agents` takes
		case "boot-failure-rate":
			name = "agent-boot-failure-rate"
		case "stop":
			name = "stop-agent"
		}
		return pflag.NormalizedName(name)
	})
	t.addFlag(cmd)
	return cmd
}

// simInstanceJSON is one entry of `muster sim instances --format json`.
type simInstanceJSON = sim.Listed

func newSimInstancesCmd(o *globalOptions) *cobra.Command {
	t := &simTarget{o: o}
	var format string
	cmd := &cobra.Command{
		Use:   "instances",
		Short: "List every instance of the sim",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			sc, err := t.client(ctx)
			if err != nil {
				return err
			}
			is, err := sc.Instances(ctx)
			if err != nil {
				return err
			}
			out := make([]simInstanceJSON, 0, len(is))
			for _, i := range is {
				out = append(out, i.Listing())
			}
			if t.endpoint == "" {
				if err := hideReleased(ctx, o, out); err != nil {
					return err
				}
			}
			var rows [][]string
			for _, i := range out {
				rows = append(rows, []string{i.ID, i.Zone, i.State, dash(i.Machine), shortUUID(i.Model), shortUUID(i.Controller), i.Created})
			}
			return api.WriteAs(cmd.OutOrStdout(), format, out, []string{"Instance", "Zone", "State", "Machine", "Model", "Controller", "Created"}, rows)
		},
	}
	formatFlag(cmd, &format, api.Formats...)
	t.addFlag(cmd)
	return cmd
}

// hideReleased clears the machine of the model's instances that their
// machine no longer records: the tag stays on an instance released by
// remove-machine --keep-instance, but it is nobody's machine any more.
func hideReleased(ctx context.Context, o *globalOptions, is []simInstanceJSON) error {
	c, model, err := o.connect(ctx)
	if err != nil {
		return err
	}
	uuid, owner, err := c.InstanceOwners(ctx, model)
	for i, inst := range is {
		if inst.Model == uuid && owner[inst.ID] != inst.Machine {
			is[i].Machine = ""
		}
	}
	return err
}

// shortUUID abbreviates a uuid for tables.
func shortUUID(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return dash(s)
}

func newSimAddInstanceCmd(o *globalOptions) *cobra.Command {
	t := &simTarget{o: o}
	var (
		zone    string
		foreign bool
	)
	cmd := &cobra.Command{
		Use:   "add-instance [--zone Z] [--foreign]",
		Short: "Add an instance that no machine launched; prints its id",
		Long: `Add an instance that no machine launched and print its id: tagged for this
controller and model (an "unknown" instance, see harvest-mode), or with
--foreign for another controller and model (never touched by muster).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if zone != "" {
				if err := muster.CheckName(zone); err != nil {
					return usageErrorf("bad --zone %q: %v", zone, muster.ErrorMessage(err))
				}
			}
			ctx := cmd.Context()
			sc, err := t.client(ctx)
			if err != nil {
				return err
			}
			controllerUUID, modelUUID := muster.NewUUID(), muster.NewUUID()
			if !foreign {
				c, model, err := o.connect(ctx)
				if err != nil {
					return err
				}
				m, err := c.Model(ctx, model)
				if err != nil {
					return err
				}
				controllerUUID, modelUUID = m.ControllerUUID, m.UUID
			}
			if zone == "" {
				if zone, err = sc.FirstAvailableZone(ctx); err != nil {
					return err
				}
			}
			inst, err := sc.AddInstance(ctx, zone, controllerUUID, modelUUID)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), inst.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&zone, "zone", "", "zone of the instance (default: the first available zone)")
	cmd.Flags().BoolVar(&foreign, "foreign", false, "tag it for another controller and model")
	t.addFlag(cmd)
	return cmd
}
