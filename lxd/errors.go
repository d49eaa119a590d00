package lxd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/musterhq/muster"
)

// classify turns a client error into a *muster.ProviderError. Context
// errors are returned wrapped, not classified, so that callers see a
// cancellation. zone is the zone a capacity failure applies to ("" when
// none); what names the operation.
//
// The table:
//   - storage full (no space left, quota exceeded) and project limits
//     reached → capacity (retryable: freeing space or instances cures it)
//   - 400, 401, 403, 404 (e.g. the image alias is missing) → zone-independent
//   - 429 → throttled
//   - 409 (a concurrent change), other 5xx, transport errors → unavailable
func classify(err error, zone, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	var pe *muster.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	kind := muster.ErrUnavailable
	var ae *APIError
	if errors.As(err, &ae) {
		msg := strings.ToLower(ae.Message)
		switch {
		case isFull(msg):
			kind = muster.ErrCapacity
		case ae.Status == http.StatusTooManyRequests:
			kind = muster.ErrThrottled
		case ae.Status == http.StatusBadRequest, ae.Status == http.StatusUnauthorized,
			ae.Status == http.StatusForbidden, ae.Status == http.StatusNotFound:
			kind = muster.ErrZoneIndependent
		}
	}
	out := &muster.ProviderError{Kind: kind, Message: fmt.Sprintf("lxd: %s: %v", what, strings.TrimPrefix(err.Error(), "lxd: ")), Err: err}
	if kind == muster.ErrCapacity {
		out.Zone = zone
	}
	return out
}

// isFull reports whether an LXD error text says that storage or a project
// limit ran out.
func isFull(msg string) bool {
	for _, s := range []string{"no space left on device", "not enough space", "disk quota exceeded", "quota exceeded"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	// Project limits: `Quota of 2 on "limits.instances" exceeded`-like texts.
	return strings.Contains(msg, "limits.") && strings.Contains(msg, "exceed")
}

// zoneIndependent is a configuration or input error no zone would cure.
func zoneIndependent(format string, args ...any) error {
	return muster.NewProviderError(muster.ErrZoneIndependent, "", "lxd: "+format, args...)
}

// capacityErr is a failure confined to one zone, e.g. its network.
func capacityErr(zone, format string, args ...any) error {
	return muster.NewProviderError(muster.ErrCapacity, zone, "lxd: "+format, args...)
}
