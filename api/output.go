package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/musterhq/muster"
	"gopkg.in/yaml.v3"
)

// This file holds how the CLI prints what the API returns: tables, JSON
// and YAML, so that the command code stays flags and calls.

// Formats are the output formats of listings; the first is the default.
var Formats = []string{"table", "json", "yaml"}

// WriteAs writes v in format: json, yaml, or else the table of header and
// rows.
func WriteAs(w io.Writer, format string, v any, header []string, rows [][]string) error {
	switch format {
	case "json":
		return WriteJSON(w, v)
	case "yaml":
		return WriteYAML(w, v)
	}
	return WriteTable(w, header, rows)
}

// WriteTable writes rows aligned under header. Cells have their control
// characters escaped (S8): they hold text agents and clouds wrote, and a
// tab or an escape sequence must not break the table or the terminal.
func WriteTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = muster.Printable(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteYAML writes v as YAML with the keys and key order of its JSON
// encoding (the API types carry JSON tags only).
func WriteYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	blockStyle(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// blockStyle turns JSON's flow style into YAML's block style, keeping empty
// lists and maps as [] and {}.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode {
		n.Style &^= yaml.DoubleQuotedStyle | yaml.FlowStyle
		return
	}
	if len(n.Content) > 0 {
		n.Style &^= yaml.FlowStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// Dash is s, or "-" for an empty cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// YesNo is a boolean cell.
func YesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// shortIDLen is how much of a long id a table shows (as docker ps does):
// enough to tell instances apart; EC2's i-… (19) and the sim's ids fit.
const shortIDLen = 19

// ShortID shortens an id longer than a table column wants (a docker
// container's 64 hex digits) unless wide; "-" for none.
func ShortID(id string, wide bool) string {
	if !wide && len(id) > shortIDLen {
		return id[:12] + "…"
	}
	return Dash(id)
}

// Cut shortens text for a table cell unless wide.
func Cut(s string, n int, wide bool) string {
	if r := []rune(s); !wide && len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// TableTime is a time in tables: UTC to the second.
func TableTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// EventsTable is the table of events.
func EventsTable(es []EventInfo, wide bool) ([]string, [][]string) {
	rows := make([][]string, 0, len(es))
	for _, e := range es {
		m := "-"
		if e.Machine != "" {
			m = "machine-" + e.Machine
		}
		rows = append(rows, []string{TableTime(e.Time), strconv.FormatInt(e.Seq, 10), m, e.Kind, e.Actor, Cut(strings.TrimSpace(e.Message), 100, wide)})
	}
	return []string{"Time", "Seq", "Machine", "Kind", "Actor", "Message"}, rows
}

// WriteStatusTable writes the model, its zones and its machines as tables.
func WriteStatusTable(w io.Writer, st Status, wide bool) error {
	if err := WriteTable(w, []string{"Model", "Provider", "Harvest", "Machines"},
		[][]string{{st.Model, st.Provider, st.HarvestMode, strconv.Itoa(len(st.Machines))}}); err != nil {
		return err
	}
	for _, kv := range [][2]string{{"provisioner", st.ProvisionerError}, {"harvest", st.HarvestBreaker}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "%s: %s\n", kv[0], muster.Printable(kv[1]))
		}
	}
	for _, r := range st.Remediation {
		fmt.Fprintln(w, muster.Printable(r.String()))
	}
	if len(st.Zones) > 0 {
		var rows [][]string
		for _, name := range sortedKeys(st.Zones) {
			z := st.Zones[name]
			rows = append(rows, []string{name, YesNo(z.Available), strconv.Itoa(z.Machines)})
		}
		fmt.Fprintln(w)
		if err := WriteTable(w, []string{"Zone", "Available", "Machines"}, rows); err != nil {
			return err
		}
	}
	if len(st.Machines) == 0 {
		return nil
	}
	ids := sortedKeys(st.Machines)
	muster.SortMachineIDs(ids)
	var rows [][]string
	for _, id := range ids {
		m := st.Machines[id]
		addr := ""
		if len(m.Addresses) > 0 {
			addr = m.Addresses[0]
		}
		msg := m.InstanceMessage
		if m.StatusMessage != "" {
			msg = m.StatusMessage
		}
		rows = append(rows, []string{id, m.Life, Dash(m.Status), ShortID(m.InstanceID, wide),
			Dash(m.InstanceStatus), Dash(m.Zone), Dash(m.Group), m.Base, Dash(m.Constraints), Dash(addr), Cut(msg, 60, wide)})
	}
	fmt.Fprintln(w)
	return WriteTable(w, []string{"Machine", "Life", "Status", "Instance", "Inst-status", "Zone", "Group", "Base", "Constraints", "Address", "Message"}, rows)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// EventLine is one event of a followed stream as a line of fixed-width
// columns (a table's widths are not known in advance).
func EventLine(e EventInfo, wide bool) string {
	_, rows := EventsTable([]EventInfo{e}, wide)
	r := rows[0]
	for i := range r {
		r[i] = muster.Printable(r[i])
	}
	return fmt.Sprintf("%-20s  %-6s  %-10s  %-18s  %-10s  %s", r[0], r[1], r[2], r[3], r[4], r[5])
}

// shownMachine is a machine as show-machine prints it: the instance's
// hardware, volumes and attachments appear once, at the machine's level.
type shownMachine struct {
	MachineInfo
	Instance *shownInstance `json:"instance"` // null until recorded
}

type shownInstance struct {
	InstanceID  string   `json:"instance-id"`
	DisplayName string   `json:"display-name,omitempty"`
	Zone        string   `json:"zone,omitempty"`
	Addresses   []string `json:"addresses,omitempty"`
}

// Shown is d as show-machine prints it.
func (d MachineDetail) Shown() any {
	m := shownMachine{MachineInfo: d.Machine}
	if i := d.Machine.Instance; i != nil {
		m.Instance = &shownInstance{InstanceID: i.InstanceID, DisplayName: i.DisplayName, Zone: i.Zone, Addresses: i.Addresses}
	}
	return struct {
		Machine shownMachine `json:"machine"`
		Events  []EventInfo  `json:"events"`
	}{m, d.Events}
}

// ModelsTable is the table of models, current marked with a *.
func ModelsTable(ms []ModelInfo, current string) ([]string, [][]string) {
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
		rows = append(rows, []string{name, m.Provider, Dash(strings.Join(cfg, " ")), m.UUID})
	}
	return []string{"Model", "Provider", "Config", "UUID"}, rows
}

// SettingsTable is the table of a model's settings: the known keys in
// their order, then any others.
func SettingsTable(cfg map[string]string) ([]string, [][]string) {
	var keys []string
	for _, k := range muster.SettingKeys {
		keys = append(keys, k.Name)
	}
	var rows [][]string
	shown := map[string]bool{}
	for _, k := range append(keys, sortedKeys(cfg)...) {
		if v, ok := cfg[k]; ok && !shown[k] {
			shown[k] = true
			rows = append(rows, []string{k, v})
		}
	}
	return []string{"Key", "Value"}, rows
}
