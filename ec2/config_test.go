package ec2

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

func TestApplyModelConfig(t *testing.T) {
	tests := []struct {
		name    string
		config  map[string]string
		want    Config
		wantErr string // substring; "" = no error
	}{
		{"region only", map[string]string{"region": "us-east-1"}, Config{Region: "us-east-1"}, ""},
		{"all keys", map[string]string{"region": "eu-central-1", "endpoint": "http://127.0.0.1:7070/ec2/", "profile": "prod"},
			Config{Region: "eu-central-1", Endpoint: "http://127.0.0.1:7070/ec2/", Profile: "prod"}, ""},
		{"gov region", map[string]string{"region": "us-gov-west-1"}, Config{Region: "us-gov-west-1"}, ""},
		{"https endpoint", map[string]string{"region": "ap-southeast-2", "endpoint": "https://ec2.ap-southeast-2.amazonaws.com"},
			Config{Region: "ap-southeast-2", Endpoint: "https://ec2.ap-southeast-2.amazonaws.com"}, ""},
		{"no region", map[string]string{"endpoint": "http://x/ec2/"}, Config{}, "region is required"},
		{"empty region", map[string]string{"region": ""}, Config{}, "region is required"},
		{"bad region", map[string]string{"region": "US East"}, Config{}, `bad region "US East"`},
		{"zone for region", map[string]string{"region": "us-east-1a"}, Config{}, `bad region "us-east-1a"`},
		{"relative endpoint", map[string]string{"region": "us-east-1", "endpoint": "/ec2/"}, Config{}, `bad endpoint "/ec2/"`},
		{"endpoint without scheme", map[string]string{"region": "us-east-1", "endpoint": "localhost:7070"}, Config{}, `bad endpoint "localhost:7070"`},
		{"ftp endpoint", map[string]string{"region": "us-east-1", "endpoint": "ftp://host/ec2/"}, Config{}, `bad endpoint "ftp://host/ec2/"`},
		{"endpoint without host", map[string]string{"region": "us-east-1", "endpoint": "http:///ec2/"}, Config{}, `bad endpoint`},
		{"endpoint with query", map[string]string{"region": "us-east-1", "endpoint": "http://h/ec2/?a=b"}, Config{}, "no query"},
		{"endpoint with user", map[string]string{"region": "us-east-1", "endpoint": "http://AKIA:secret@h/ec2/"}, Config{}, "no user info"},
		{"profile with space", map[string]string{"region": "us-east-1", "profile": "my profile"}, Config{}, `bad profile "my profile"`},
		{"unknown key", map[string]string{"region": "us-east-1", "zones": "a,b"}, Config{}, `unknown ec2 provider config key "zones" (known: region, endpoint, profile, identity-cert)`},
		{"access-key", map[string]string{"region": "us-east-1", "access-key": "AKIA"}, Config{}, `config key "access-key" looks like a credential`},
		{"secret-key", map[string]string{"region": "us-east-1", "secret-key": "x"}, Config{}, `config key "secret-key" looks like a credential`},
		{"aws_access_key_id", map[string]string{"region": "us-east-1", "aws_access_key_id": "AKIA"}, Config{}, `"aws_access_key_id" looks like a credential`},
		{"aws_secret_access_key", map[string]string{"region": "us-east-1", "aws_secret_access_key": "x"}, Config{}, `"aws_secret_access_key" looks like a credential`},
		{"secret", map[string]string{"region": "us-east-1", "secret": "x"}, Config{}, `"secret" looks like a credential`},
		{"token", map[string]string{"region": "us-east-1", "token": "x"}, Config{}, `"token" looks like a credential`},
		{"session token", map[string]string{"region": "us-east-1", "aws_session_token": "x"}, Config{}, `"aws_session_token" looks like a credential`},
		{"identity-cert missing", map[string]string{"region": "us-east-1", "identity-cert": "/no/such/cert.pem"}, Config{}, "identity-cert: open /no/such/cert.pem"},
		{"identity-cert not PEM", map[string]string{"region": "us-east-1", "identity-cert": "config_test.go"}, Config{}, "config_test.go holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Profile: "before"}
			if tt.want.Profile == "" && tt.wantErr == "" {
				tt.want.Profile = "before"
			}
			err := ApplyModelConfig(&cfg, tt.config)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if cfg.Region != tt.want.Region || cfg.Endpoint != tt.want.Endpoint || cfg.Profile != tt.want.Profile {
					t.Errorf("got %+v, want %+v", cfg, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %q, want it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line", err)
			}
			if !muster.IsCode(err, muster.EInvalid) {
				t.Errorf("got code %q, want %q", muster.ErrorCode(err), muster.EInvalid)
			}
			if !reflect.DeepEqual(cfg, Config{Profile: "before"}) {
				t.Errorf("cfg changed on error: %+v", cfg)
			}
		})
	}
}

func TestCredentialErrorSaysWhatToDo(t *testing.T) {
	var cfg Config
	err := ApplyModelConfig(&cfg, map[string]string{"region": "us-east-1", "aws_secret_access_key": "wJalr"})
	if err == nil || !strings.Contains(err.Error(), "muster never stores credentials") || !strings.Contains(err.Error(), "AWS credential chain") {
		t.Errorf("got %v, want an error pointing at the AWS credential chain", err)
	}
	if strings.Contains(err.Error(), "wJalr") {
		t.Errorf("error %q repeats the secret", err)
	}
}

func TestOpenChecksConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, Config{}, "c", "m"); !muster.IsCode(err, muster.EInvalid) || !strings.Contains(err.Error(), "region is required") {
		t.Errorf("Open without region: got %v, want region is required", err)
	}
	if _, err := Open(ctx, Config{Region: "us-east-1"}, "", "m"); !muster.IsCode(err, muster.EInvalid) {
		t.Errorf("Open without controller: got %v, want EInvalid", err)
	}
	if _, err := Open(ctx, Config{Region: "us-east-1", Endpoint: "nope"}, "c", "m"); !muster.IsCode(err, muster.EInvalid) {
		t.Errorf("Open with a bad endpoint: got %v, want EInvalid", err)
	}
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	_, err := Open(ctx, Config{Region: "us-east-1", Profile: "no-such-profile"}, "c", "m")
	if !muster.IsCode(err, muster.EInvalid) || !strings.Contains(err.Error(), "no-such-profile") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Open with an unknown profile: got %v, want a one-line EInvalid naming the profile", err)
	}
}

// identity-cert reads the PEM certificate that verifies the region's
// instance identity documents; with one, batches enrol.
func TestIdentityCertConfig(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	path := filepath.Join(t.TempDir(), "aws.pem")
	if err := os.WriteFile(path, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if err := ApplyModelConfig(&cfg, map[string]string{"region": "us-east-1", "identity-cert": path}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfg.IdentityCert, certPEM) {
		t.Fatalf("IdentityCert not read from %s", path)
	}
	if (&Provider{idCert: cfg.IdentityCert}).EnrolsBatches() != true || (&Provider{}).EnrolsBatches() {
		t.Fatalf("EnrolsBatches must follow the identity certificate")
	}
}
