package muster

import (
	"errors"
	"fmt"
)

func fmtWrap(err error) error  { return fmt.Errorf("context: %w", err) }
func errorsNew(s string) error { return errors.New(s) }
