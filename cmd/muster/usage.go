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
