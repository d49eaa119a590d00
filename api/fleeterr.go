package api

import (
	"fmt"
	"regexp"
	"strings"
)

// unknownField matches yaml.v3's words for a key the type lacks, which
// name the Go type ("field colour not found in type api.FleetGroup"); the
// key may be empty or span lines (found by FuzzParseFleet).
var unknownField = regexp.MustCompile(`(?s)field (.*?) not found in type (\S+)`)

// fleetYAMLError is a YAML decoding error on one line, in the fleet
// file's words rather than Go's.
func fleetYAMLError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:")
	msg = unknownField.ReplaceAllStringFunc(msg, func(m string) string {
		sub := unknownField.FindStringSubmatch(m)
		has := "a group has name, count, constraints, base, storage"
		if sub[2] != "api.FleetGroup" {
			has = "a fleet file has groups"
		}
		return fmt.Sprintf("unknown field %q (%s)", sub[1], has)
	})
	msg = otherTag.ReplaceAllStringFunc(goTypes.Replace(msg), func(tag string) string {
		return fmt.Sprintf("a value of YAML type %q", strings.ReplaceAll(tag, "!", ""))
	})
	return strings.Join(strings.Fields(msg), " ")
}

// otherTag is a YAML tag goTypes does not name.
var otherTag = regexp.MustCompile(`!!\S*`)

// goTypes puts yaml.v3's Go type names and YAML tags in the fleet file's
// words.
var goTypes = strings.NewReplacer(
	"into []api.FleetGroup", "into the list of groups",
	"into api.FleetGroup", "into a group (name, count, constraints, …)",
	"into api.fleetFile", "into a fleet file (a map with groups)",
	"!!int", "the number", "!!str", "the string", "!!seq", "a list", "!!map", "a map",
	"!!bool", "the boolean", "!!float", "the number", "!!null", "null", "!!binary", "binary data", "!!timestamp", "the time",
)
