package auth

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ca, err := LoadOrCreateCA(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA {
		t.Errorf("got IsCA false, want true")
	}
	if got, want := ca.Cert.NotAfter.Sub(now), CAValidity; got < want-time.Hour || got > want+time.Hour {
		t.Errorf("got validity %v, want about %v", got, want)
	}
	for _, tc := range []struct {
		name string
		mode os.FileMode
	}{{CACertFile, 0o644}, {CAKeyFile, 0o600}} {
		fi, err := os.Stat(filepath.Join(dir, tc.name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != tc.mode {
			t.Errorf("%s: got mode %v, want %v", tc.name, got, tc.mode)
		}
	}
	again, err := LoadOrCreateCA(dir, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cert.Equal(ca.Cert) || !again.Key.Equal(ca.Key) {
		t.Errorf("second load gave a different CA")
	}
}

func TestLoadOrCreateCAHalfPresent(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CACertFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateCA(dir, now); err == nil {
		t.Fatalf("got nil error with only %s present, want an error", CACertFile)
	}
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil {
		t.Errorf("a key was written next to a stray certificate")
	}
}

func TestParseCAMismatch(t *testing.T) {
	a, err := NewCA("a", now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCA("b", now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cert, key []byte
	}{
		{"mismatched key", a.CertPEM, b.KeyPEM},
		{"garbage cert", []byte("nope"), a.KeyPEM},
		{"garbage key", a.CertPEM, []byte("nope")},
		{"key as cert", a.KeyPEM, a.KeyPEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseCA(tc.cert, tc.key); err == nil {
				t.Errorf("got nil error, want an error")
			}
		})
	}
}

// TestTLSRoundTrip serves HTTPS with a certificate of one CA and checks
// that a client trusting that CA connects and one trusting another does not.
func TestTLSRoundTrip(t *testing.T) {
	ca, err := NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate([]string{"localhost", "127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.TLS = ServerTLSConfig(cert)
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		name   string
		caPEM  []byte
		wantOK bool
	}{
		{"same CA", ca.CertPEM, true},
		{"other CA", other.CertPEM, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ClientTLSConfig(tc.caPEM)
			if err != nil {
				t.Fatal(err)
			}
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
			defer hc.CloseIdleConnections()
			resp, err := hc.Get(srv.URL)
			if resp != nil {
				resp.Body.Close()
			}
			if got := err == nil; got != tc.wantOK {
				t.Errorf("got ok %v (err %v), want %v", got, err, tc.wantOK)
			}
		})
	}
}

func TestServerCertificateHosts(t *testing.T) {
	ca, err := NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate([]string{"ctl.example", "10.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.Leaf.VerifyHostname("ctl.example"); err != nil {
		t.Errorf("dns name: %v", err)
	}
	if err := cert.Leaf.VerifyHostname("10.0.0.1"); err != nil {
		t.Errorf("ip: %v", err)
	}
	if err := cert.Leaf.VerifyHostname("other.example"); err == nil {
		t.Errorf("got nil error for a host not in the certificate")
	}
	if cert.Leaf.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("server certificate outlives its CA")
	}
	if _, err := ca.ServerCertificate(nil, now); err == nil {
		t.Errorf("got nil error for no hosts")
	}
	if _, err := ClientTLSConfig([]byte("junk")); err == nil {
		t.Errorf("got nil error for a PEM without certificates")
	}
}

func TestTokens(t *testing.T) {
	tok, hash := NewToken()
	tok2, _ := NewToken()
	for _, tc := range []struct {
		name  string
		token string
		hash  string
		want  bool
	}{
		{"right", tok, hash, true},
		{"other token", tok2, hash, false},
		{"empty token", "", hash, false},
		{"empty hash", tok, "", false},
		{"token as hash", tok, tok, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TokenMatches(tc.token, tc.hash); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		want   string
		wantOK bool
	}{
		{"bearer", "Bearer abc", "abc", true},
		{"lower case scheme", "bearer abc", "abc", true},
		{"basic", "Basic abc", "", false},
		{"empty token", "Bearer ", "", false},
		{"missing", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			got, ok := BearerToken(r)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("got %q %v, want %q %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	r := httptest.NewRequest("GET", "/", nil)
	SetBearerToken(r, "xyz")
	if got, _ := BearerToken(r); got != "xyz" {
		t.Errorf("got %q, want %q", got, "xyz")
	}
}

// TestTLS12OffersOnlyAEAD checks S9: a TLS 1.2 client that offers only
// CBC suites is refused; one offering an AEAD suite gets through.
func TestTLS12OffersOnlyAEAD(t *testing.T) {
	ca, err := NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = ServerTLSConfig(cert)
	srv.StartTLS()
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		suite  uint16
		wantOK bool
	}{
		{"CBC", tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{"CBC-SHA256", tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, false},
		{"GCM", tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{"ChaCha20", tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ClientTLSConfig(ca.CertPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxVersion = tls.VersionTLS12
			cfg.CipherSuites = []uint16{tc.suite}
			conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), cfg)
			if err == nil {
				conn.Close()
			}
			if got := err == nil; got != tc.wantOK {
				t.Errorf("TLS 1.2 with %s only: got ok %v (err %v), want %v", tls.CipherSuiteName(tc.suite), got, err, tc.wantOK)
			}
		})
	}
}
