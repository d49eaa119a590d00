package api

import (
	"bufio"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"
)

// WriteStatusJSON writes `muster status --format json`: the same bytes as
// WriteJSON(w, st.Script()), machines in the same (string) order, but
// written machine by machine into a buffered writer instead of encoded
// by reflection and indented in a second pass over the whole document:
// at 100,000 machines that pass was most of the CLI's time.
func WriteStatusJSON(w io.Writer, st Status) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	b := make([]byte, 0, 1024)
	b = append(b, "{\n  \"model\": "...)
	b = appendJSONString(b, st.Model)
	b = append(b, ",\n  \"provider\": "...)
	b = appendJSONString(b, st.Provider)
	b = append(b, ",\n  \"harvest-mode\": "...)
	b = appendJSONString(b, st.HarvestMode)
	b = append(b, ",\n  \"machines\": {"...)
	ids := make([]string, 0, len(st.Machines))
	for id := range st.Machines {
		ids = append(ids, id)
	}
	slices.Sort(ids) // encoding/json's order of map keys
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = appendJSONString(b, id)
		b = append(b, ": "...)
		b = appendMachineJSON(b, st.Machines[id], indented)
		if len(b) > 32<<10 {
			bw.Write(b)
			b = b[:0]
		}
	}
	if len(ids) > 0 {
		b = append(b, "\n  "...)
	}
	b = append(b, "},\n  \"zones\": "...)
	zones := st.Zones
	if zones == nil {
		zones = map[string]ZoneStatus{}
	}
	z, err := json.MarshalIndent(zones, "  ", "  ")
	if err != nil {
		return err
	}
	b = append(append(b, z...), "\n}\n"...)
	bw.Write(b)
	return bw.Flush()
}

// jsonLayout is how appendMachineJSON lays a machine out: the text
// before a key, between a key and its value, before an address, after
// the last address and at the end.
type jsonLayout struct{ key, colon, item, lastItem, end string }

var (
	// indented is WriteJSON's layout two levels deep (the CLI's).
	indented = jsonLayout{key: "\n      \"", colon: "\": ", item: "\n        ", lastItem: "\n      ", end: "\n    }"}
	// compact is encoding/json's (the server's stream).
	compact = jsonLayout{key: "\"", colon: "\":", end: "}"}
)

// appendMachineJSON appends m in layout l, as encoding/json writes it
// (addresses as [] when there are none).
func appendMachineJSON(b []byte, m MachineStatus, l jsonLayout) []byte {
	field := func(b []byte, key string) []byte {
		return append(append(append(b, l.key...), key...), l.colon...)
	}
	b = append(b, '{')
	for i, kv := range [...]struct{ k, v string }{
		{"life", m.Life}, {"status", m.Status}, {"status-message", m.StatusMessage}, {"instance-id", m.InstanceID},
		{"instance-status", m.InstanceStatus}, {"instance-message", m.InstanceMessage}, {"zone", m.Zone}, {"group", m.Group},
		{"base", m.Base}, {"constraints", m.Constraints}, {"hardware", m.Hardware},
	} {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(field(b, kv.k), kv.v)
	}
	b = append(field(append(b, ','), "addresses"), '[')
	for i, a := range m.Addresses {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(append(b, l.item...), a)
	}
	if len(m.Addresses) > 0 {
		b = append(b, l.lastItem...)
	}
	b = append(field(append(b, "],"...), "keep-instance"), strconv.FormatBool(m.KeepInstance)...)
	return append(b, l.end...)
}

// appendJSONString appends s quoted as encoding/json quotes it (HTML
// characters, U+2028 and U+2029 escaped, invalid UTF-8 as U+FFFD).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, s[start:i]...), `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(append(b, s[start:i]...), `\u202`...)
			b = append(b, hex[r&0xf])
		} else {
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
