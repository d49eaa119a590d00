package muster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func testCAPEM(tb testing.TB) string {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestParseAgentConfig(t *testing.T) {
	ca := testCAPEM(t)
	good := AgentConfig{
		Controller: "c-uuid", Model: "m-uuid", Machine: "3", Nonce: "machine-0:x", Password: "pw",
		APIAddresses: []string{"https://127.0.0.1:17070", "https://172.18.0.1:17070"}, CACert: ca,
	}
	enc := func(mod func(m map[string]any)) []byte {
		b, _ := json.Marshal(good)
		var m map[string]any
		json.Unmarshal(b, &m)
		mod(m)
		b, _ = json.Marshal(m)
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr string // substring; "" = valid
	}{
		{"good", enc(func(map[string]any) {}), ""},
		{"unknown key ignored", enc(func(m map[string]any) { m["future"] = 1 }), ""},
		{"empty", []byte("  \n"), "empty"},
		{"not json", []byte("machine: 3"), "bad agent config"},
		{"no machine", enc(func(m map[string]any) { delete(m, "machine") }), "machine is missing"},
		{"no model", enc(func(m map[string]any) { m["model"] = "" }), "model is missing"},
		{"no nonce", enc(func(m map[string]any) { delete(m, "nonce") }), "nonce is missing"},
		{"no password", enc(func(m map[string]any) { delete(m, "password") }), "password is missing"},
		{"no addresses", enc(func(m map[string]any) { m["api-addresses"] = []string{} }), "api-addresses is missing"},
		{"http address", enc(func(m map[string]any) { m["api-addresses"] = []string{"http://1.2.3.4:1"} }), "bad address"},
		{"no ca", enc(func(m map[string]any) { delete(m, "ca-cert") }), "ca-cert is missing"},
		{"bad ca", enc(func(m map[string]any) { m["ca-cert"] = "junk" }), "no PEM certificate"},
		{"wrong type", enc(func(m map[string]any) { m["machine"] = 3 }), "bad agent config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAgentConfig(tt.data)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if got.Machine != good.Machine || got.Nonce != good.Nonce || len(got.APIAddresses) != 2 {
					t.Fatalf("got %+v, want %+v", got, good)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
			if ErrorCode(err) != EInvalid {
				t.Fatalf("got code %q, want %q", ErrorCode(err), EInvalid)
			}
		})
	}
}

// Validate parses a CA certificate once and remembers it, but only one
// that parsed: a bad certificate is refused after a good one and the
// good one still passes after a bad one.
func TestValidateRemembersOnlyAGoodCA(t *testing.T) {
	c := AgentConfig{Model: "m", Machine: "1", Nonce: "n", Password: "p", APIAddresses: []string{"https://h:1"}, CACert: testCAPEM(t)}
	good := c.CACert
	bad := strings.Replace(good, good[40:48], "AAAAAAAA", 1) // PEM still, DER broken
	for i, tc := range []struct {
		ca   string
		want bool
	}{{good, true}, {bad, false}, {good, true}, {"junk", false}, {bad, false}} {
		c.CACert = tc.ca
		if err := c.Validate(); (err == nil) != tc.want {
			t.Errorf("validation %d: %v, want ok=%v", i, err, tc.want)
		}
	}
}

func TestEnrolmentConfigValidates(t *testing.T) {
	ca := testCAPEM(t)
	cfg := AgentConfig{Model: "m", Machine: "3", EnrolToken: "tok", APIAddresses: []string{"https://h:1"}, CACert: ca}
	if err := cfg.Validate(); err != nil || !cfg.Enrolling() {
		t.Fatalf("enrolment config: %v (enrolling %v)", err, cfg.Enrolling())
	}
	cfg.MetadataURL = "ftp://x"
	if err := cfg.Validate(); ErrorCode(err) != EInvalid {
		t.Fatalf("bad metadata-url: got %v, want invalid", err)
	}
	cfg.MetadataURL = "http://169.254.169.254/latest"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("metadata-url: %v", err)
	}
	cfg.EnrolToken = ""
	if err := cfg.Validate(); ErrorCode(err) != EInvalid {
		t.Fatalf("no token and no password: got %v, want invalid", err)
	}
}
