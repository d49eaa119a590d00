package ec2

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
)

// newOffline returns a provider whose endpoint refuses connections, for
// tests of what is decided before any call.
func newOffline(tb testing.TB) *Provider {
	tb.Helper()
	p, err := Open(context.Background(), Config{
		Region:      "us-east-1",
		Endpoint:    "http://127.0.0.1:1/ec2/",
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
	}, "ctrl-uuid", "model-uuid")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
