package ec2

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go"
	"github.com/musterhq/muster"
)

// Error codes with a special meaning.
const (
	codeInstanceNotFound  = "InvalidInstanceID.NotFound"
	codeInstanceMalformed = "InvalidInstanceID.Malformed"
	codeSubnetNotFound    = "InvalidSubnetID.NotFound"
)

// throttleCodes are EC2's (and the SDK's) request rate limit codes.
var throttleCodes = map[string]bool{
	"RequestLimitExceeded": true,
	"Throttling":           true,
	"ThrottlingException":  true,
	"RequestThrottled":     true,
}

// capacityCodes are failures confined to the requested zone.
var capacityCodes = map[string]bool{
	"InsufficientInstanceCapacity":      true,
	"InsufficientHostCapacity":          true,
	"InsufficientCapacity":              true,
	"InsufficientFreeAddressesInSubnet": true,
}

// quotaCodes are an account's or region's limits used up: no zone helps.
var quotaCodes = map[string]bool{
	"VcpuLimitExceeded":            true,
	"InstanceLimitExceeded":        true,
	"MaxSpotInstanceCountExceeded": true,
	"VolumeLimitExceeded":          true,
	"AddressLimitExceeded":         true,
}

// zoneIndependentCodes are failures no other zone would cure (besides
// every "Invalid…" code).
var zoneIndependentCodes = map[string]bool{
	"Unsupported":                 true,
	"UnauthorizedOperation":       true,
	"AuthFailure":                 true,
	"SignatureDoesNotMatch":       true,
	"OptInRequired":               true,
	"MissingParameter":            true,
	"IdempotentParameterMismatch": true,
}

// retryCodes are the only API error codes the SDK retries by itself: a
// server failure. Throttling and capacity errors go back to muster at once,
// which has its own rate limiter and zone failover.
var retryCodes = map[string]struct{}{
	"InternalError": {},
	"Unavailable":   {},
}

// classify turns an SDK error into a *muster.ProviderError (the original
// error wrapped) with a one-line message naming the action and the code.
// Cancellation and deadlines are returned as context errors, not provider
// failures. zone is the zone the call was for, "" when none.
//
// The table (EC2-CONTRACT.md):
//   - RequestLimitExceeded, Throttling, ThrottlingException, RequestThrottled → throttled
//   - Insufficient*Capacity, InsufficientFreeAddressesInSubnet → capacity in zone
//   - VcpuLimitExceeded, InstanceLimitExceeded, MaxSpotInstanceCountExceeded,
//     VolumeLimitExceeded, AddressLimitExceeded → quota (region-wide)
//   - Unavailable → unavailable in zone; InternalError, any other 5xx, connection errors → unavailable
//   - Invalid*, MissingParameter, IdempotentParameterMismatch, Unsupported,
//     UnauthorizedOperation, AuthFailure, SignatureDoesNotMatch, OptInRequired,
//     no credentials → zone-independent
//   - any other 4xx → unavailable in zone (unclassified counts as zone-specific)
func classify(err error, action, zone string) error {
	if err == nil {
		return nil
	}
	var pe *muster.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("ec2 %s: %w", action, contextErr(err))
	}
	where := ""
	if zone != "" {
		where = " in zone " + zone
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		msg := fmt.Sprintf("ec2 %s%s: %s: %s", action, where, code, oneLine(ae.ErrorMessage()))
		kind, z := kindOf(code, httpStatus(err))
		if z {
			return &muster.ProviderError{Kind: kind, Zone: zone, Message: msg, Err: err}
		}
		return &muster.ProviderError{Kind: kind, Message: msg, Err: err}
	}
	var ce *credentialsError
	var se *v4.SigningError
	if errors.As(err, &ce) || errors.As(err, &se) {
		cause := err
		if ce != nil {
			cause = ce.err
		}
		return &muster.ProviderError{Kind: muster.ErrZoneIndependent, Err: err,
			Message: fmt.Sprintf("ec2 %s: no usable AWS credentials (set them up in the AWS credential chain: environment, ~/.aws, profile, SSO or an instance role): %s", action, oneLine(cause.Error()))}
	}
	return &muster.ProviderError{Kind: muster.ErrUnavailable, Err: err,
		Message: fmt.Sprintf("ec2 %s%s: %s", action, where, oneLine(err.Error()))}
}

// kindOf classifies an API error code and HTTP status; zoned reports
// whether the error applies to the requested zone.
func kindOf(code string, status int) (kind muster.ProviderErrorKind, zoned bool) {
	switch {
	case throttleCodes[code]:
		return muster.ErrThrottled, false
	case capacityCodes[code]:
		return muster.ErrCapacity, true
	case quotaCodes[code]:
		return muster.ErrQuota, false
	case code == "Unavailable":
		return muster.ErrUnavailable, true
	case code == "InternalError", status >= 500:
		return muster.ErrUnavailable, false
	case zoneIndependentCodes[code], strings.HasPrefix(code, "Invalid"):
		return muster.ErrZoneIndependent, false
	}
	return muster.ErrUnavailable, true
}

// contextErr returns the context error in err's chain, so that the caller
// sees context.Canceled and not the SDK's wrapping of it.
func contextErr(err error) error {
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	return context.DeadlineExceeded
}

// httpStatus returns the HTTP status of an SDK response error, 0 if none.
func httpStatus(err error) int {
	var hs interface{ HTTPStatusCode() int }
	if errors.As(err, &hs) {
		return hs.HTTPStatusCode()
	}
	return 0
}

// apiCode returns the EC2 error code of err, "" if it has none.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// apiMessage returns the EC2 error message of err, "" if it has none.
func apiMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorMessage()
	}
	return ""
}

var instanceIDRE = regexp.MustCompile(`i-[0-9A-Za-z]+`)

// idsInMessage returns the instance ids named in an EC2 error message,
// e.g. "The instance IDs 'i-a, i-b' do not exist".
func idsInMessage(msg string) []string {
	return instanceIDRE.FindAllString(msg, -1)
}

// oneLine folds whitespace so that a message fits on one line, and bounds
// its length.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const max = 400
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// zoneIndependent is an input or configuration error no zone would cure.
func zoneIndependent(format string, args ...any) error {
	return muster.NewProviderError(muster.ErrZoneIndependent, "", "ec2: "+format, args...)
}
