package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
)

// classify turns an engine error into a *muster.ProviderError. Context
// errors are returned as they are, so that callers see a cancellation and
// not a provider failure. what names the operation, e.g. "create container".
//
// The table:
//   - engine unreachable, 5xx, conflicts, unknown transport errors → unavailable
//   - not found, invalid argument (400), permission/auth → zone-independent
func classify(err error, what string) error {
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
	switch {
	case client.IsErrConnectionFailed(err):
		kind = muster.ErrUnavailable
	case cerrdefs.IsNotFound(err), cerrdefs.IsInvalidArgument(err),
		cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err),
		cerrdefs.IsNotImplemented(err), cerrdefs.IsFailedPrecondition(err):
		kind = muster.ErrZoneIndependent
	}
	return &muster.ProviderError{Kind: kind, Message: fmt.Sprintf("docker: %s: %v", what, err), Err: err}
}

// zoneIndependent is a configuration or input error no zone would cure.
func zoneIndependent(format string, args ...any) error {
	return muster.NewProviderError(muster.ErrZoneIndependent, "", "docker: "+format, args...)
}

// capacity is a failure confined to one zone, e.g. its network.
func capacity(zone string, err error, format string, args ...any) error {
	return &muster.ProviderError{Kind: muster.ErrCapacity, Zone: zone,
		Message: fmt.Sprintf("docker: "+format, args...) + ": " + err.Error(), Err: err}
}
