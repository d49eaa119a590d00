package muster

import (
	"errors"
	"fmt"
)

// Error codes. They are the API's codes (SPEC §5.3); api/ maps them to HTTP
// statuses.
const (
	EInvalid        = "invalid"
	EUnauthorized   = "unauthorized"
	ENotProvisioned = "not-provisioned"
	EForbidden      = "forbidden"
	ENotFound       = "not-found"
	EConflict       = "conflict"
	EUnavailable    = "unavailable"
	EInternal       = "internal"
)

// Error is an error with a code and a message that is safe to show a user.
type Error struct {
	Code    string
	Message string
	Err     error // the underlying cause, if any; not shown to users
}

func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EInternal
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage returns the user-safe message of the first *Error in err's
// chain, or a generic message for errors without a code.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Error()
	}
	return "internal error"
}

// IsCode reports whether err carries the given code.
func IsCode(err error, code string) bool { return err != nil && ErrorCode(err) == code }
