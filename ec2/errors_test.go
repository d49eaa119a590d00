package ec2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/musterhq/muster"
)

// apiError is an error as the SDK returns it for an EC2 error document.
func apiError(op, code, msg string, status int) error {
	return &smithy.OperationError{ServiceID: "EC2", OperationName: op, Err: &awshttp.ResponseError{
		RequestID: "req-1",
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err:      &smithy.GenericAPIError{Code: code, Message: msg, Fault: smithy.FaultUnknown},
		},
	}}
}

func TestClassify(t *testing.T) {
	const zone = "us-east-1a"
	tests := []struct {
		code     string
		status   int
		kind     muster.ProviderErrorKind
		wantZone bool
	}{
		{"RequestLimitExceeded", 503, muster.ErrThrottled, false},
		{"Throttling", 400, muster.ErrThrottled, false},
		{"ThrottlingException", 400, muster.ErrThrottled, false},
		{"RequestThrottled", 503, muster.ErrThrottled, false},
		{"InsufficientInstanceCapacity", 500, muster.ErrCapacity, true},
		{"InsufficientHostCapacity", 500, muster.ErrCapacity, true},
		{"InsufficientCapacity", 500, muster.ErrCapacity, true},
		{"InsufficientFreeAddressesInSubnet", 400, muster.ErrCapacity, true},
		{"VcpuLimitExceeded", 400, muster.ErrQuota, false},
		{"InstanceLimitExceeded", 400, muster.ErrQuota, false},
		{"MaxSpotInstanceCountExceeded", 400, muster.ErrQuota, false},
		{"InternalError", 500, muster.ErrUnavailable, false},
		{"Unavailable", 503, muster.ErrUnavailable, true},
		{"ServiceUnavailable", 503, muster.ErrUnavailable, false},
		{"InvalidAMIID.NotFound", 400, muster.ErrZoneIndependent, false},
		{"InvalidParameterValue", 400, muster.ErrZoneIndependent, false},
		{"InvalidParameterCombination", 400, muster.ErrZoneIndependent, false},
		{"InvalidSubnetID.NotFound", 400, muster.ErrZoneIndependent, false},
		{"InvalidBlockDeviceMapping", 400, muster.ErrZoneIndependent, false},
		{"InvalidAction", 400, muster.ErrZoneIndependent, false},
		{"MissingParameter", 400, muster.ErrZoneIndependent, false},
		{"IdempotentParameterMismatch", 400, muster.ErrZoneIndependent, false},
		{"Unsupported", 400, muster.ErrZoneIndependent, false},
		{"UnauthorizedOperation", 403, muster.ErrZoneIndependent, false},
		{"AuthFailure", 401, muster.ErrZoneIndependent, false},
		{"SignatureDoesNotMatch", 403, muster.ErrZoneIndependent, false},
		{"OptInRequired", 401, muster.ErrZoneIndependent, false},
		{"SomethingNew", 409, muster.ErrUnavailable, true},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			orig := apiError("RunInstances", tt.code, "the message\nof two lines", tt.status)
			err := classify(orig, "RunInstances", zone)
			var pe *muster.ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("got %T %v, want a *muster.ProviderError", err, err)
			}
			if pe.Kind != tt.kind {
				t.Errorf("got kind %s, want %s", pe.Kind, tt.kind)
			}
			wantZone := ""
			if tt.wantZone {
				wantZone = zone
			}
			if pe.Zone != wantZone {
				t.Errorf("got zone %q, want %q", pe.Zone, wantZone)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("message %q is not one line", msg)
			}
			if !strings.Contains(msg, "RunInstances") || !strings.Contains(msg, tt.code) || !strings.Contains(msg, "the message of two lines") {
				t.Errorf("message %q does not name the action, the code and the message", msg)
			}
			var ge *smithy.GenericAPIError
			if !errors.As(err, &ge) || ge.Code != tt.code {
				t.Errorf("the original error is not wrapped: %v", err)
			}
			if muster.IsZoneIndependent(err) != (tt.kind == muster.ErrZoneIndependent) {
				t.Errorf("IsZoneIndependent = %v for kind %s", muster.IsZoneIndependent(err), tt.kind)
			}
		})
	}
}

func TestClassifyNonAPIErrors(t *testing.T) {
	t.Run("cancelled", func(t *testing.T) {
		err := classify(&smithy.OperationError{OperationName: "RunInstances", Err: &smithy.CanceledError{Err: context.Canceled}}, "RunInstances", "a")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
		if muster.ProviderErrorKindOf(err) != 0 {
			t.Errorf("a cancellation is classified as %s", muster.ProviderErrorKindOf(err))
		}
	})
	t.Run("deadline", func(t *testing.T) {
		err := classify(fmt.Errorf("op: %w", context.DeadlineExceeded), "DescribeInstances", "")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("connection", func(t *testing.T) {
		orig := &smithy.OperationError{OperationName: "RunInstances", Err: &smithyhttp.RequestSendError{
			Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}}
		err := classify(orig, "RunInstances", "a")
		if k := muster.ProviderErrorKindOf(err); k != muster.ErrUnavailable {
			t.Errorf("got kind %s, want unavailable", k)
		}
		var se *smithyhttp.RequestSendError
		if !errors.As(err, &se) {
			t.Errorf("the original error is not wrapped: %v", err)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		orig := &smithy.OperationError{OperationName: "DescribeInstances", Err: &v4.SigningError{Err: errors.New("failed to retrieve credentials: no EC2 IMDS role found")}}
		err := classify(orig, "DescribeInstances", "")
		if k := muster.ProviderErrorKindOf(err); k != muster.ErrZoneIndependent {
			t.Errorf("got kind %s, want zone-independent", k)
		}
		if !strings.Contains(err.Error(), "credential chain") {
			t.Errorf("message %q does not say where credentials come from", err)
		}
	})
	t.Run("credentials chain", func(t *testing.T) {
		orig := &smithy.OperationError{OperationName: "RunInstances", Err: fmt.Errorf("get identity: %w", &credentialsError{errors.New("no EC2 IMDS role found")})}
		err := classify(orig, "RunInstances", "a")
		if k := muster.ProviderErrorKindOf(err); k != muster.ErrZoneIndependent || !strings.Contains(err.Error(), "no EC2 IMDS role found") {
			t.Errorf("got %s %v, want a zone-independent error with the cause", k, err)
		}
	})
	t.Run("already classified", func(t *testing.T) {
		orig := muster.NewProviderError(muster.ErrCapacity, "b", "full")
		if err := classify(orig, "RunInstances", "a"); err != orig {
			t.Errorf("got %v, want the error unchanged", err)
		}
	})
	if classify(nil, "x", "") != nil {
		t.Errorf("classify(nil) is not nil")
	}
}

func TestIDsInMessage(t *testing.T) {
	tests := []struct {
		msg  string
		want []string
	}{
		{"The instance ID 'i-0123456789abcdef0' does not exist", []string{"i-0123456789abcdef0"}},
		{"The instance IDs 'i-0a, i-0b' do not exist", []string{"i-0a", "i-0b"}},
		{`Invalid id: "i-xyz" (expecting "i-...")`, []string{"i-xyz"}},
		{"nothing here", nil},
	}
	for _, tt := range tests {
		if got := idsInMessage(tt.msg); !slices.Equal(got, tt.want) {
			t.Errorf("idsInMessage(%q) = %v, want %v", tt.msg, got, tt.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\n  b\tc "); got != "a b c" {
		t.Errorf("got %q", got)
	}
	long := strings.Repeat("é", 300)
	got := oneLine(long)
	if !strings.HasSuffix(got, "…") || len(got) > 410 || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("long message cut badly: %d bytes", len(got))
	}
}
