package main

import "strings"

// isCobraUsageError recognises the errors cobra itself returns for a bad
// command line (unknown command, wrong number of arguments), which carry no
// type of their own.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "requires at most", "requires exactly", "received ", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// suggestion puts cobra's typo suggestion ("unknown command … Did you
// mean this? add-machine", on several lines) on the error's line.
func suggestion(msg string) string {
	before, after, ok := strings.Cut(msg, "\n\nDid you mean this?\n")
	if !ok {
		return msg
	}
	return strings.TrimSpace(before) + `; did you mean "` + strings.Join(strings.Fields(after), `" or "`) + `"?`
}
