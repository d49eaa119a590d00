package api

import (
	"regexp"
	"strings"
)

// unknownField matches yaml.v3's words for a key the type lacks, which
// name the Go type ("field colour not found in type api.FleetGroup").
var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// fleetYAMLError is a YAML decoding error on one line, in the fleet
// file's words rather than Go's.
func fleetYAMLError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:")
	msg = unknownField.ReplaceAllString(msg, `unknown field "$1" (a group has name, count, constraints, base, storage)`)
	return strings.Join(strings.Fields(msg), " ")
}
