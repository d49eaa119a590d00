package auth_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
)

// signer is a key and its certificate, as a cloud's identity signer.
type signer struct {
	key  *ecdsa.PrivateKey
	cert []byte
}

func newSigner(tb testing.TB) signer {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return signer{key: key, cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (s signer) sign(tb testing.TB, doc []byte) string {
	sum := sha256.Sum256(doc)
	sig, err := ecdsa.SignASN1(rand.Reader, s.key, sum[:])
	if err != nil {
		tb.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

func TestVerifyIdentity(t *testing.T) {
	s := newSigner(t)
	doc := []byte(`{"instanceId":"i-0abc","region":"us-east-1","availabilityZone":"us-east-1a","pendingTime":"2026-01-02T03:04:05Z"}`)
	sig := s.sign(t, doc)
	id, err := auth.VerifyIdentity(s.cert, doc, sig)
	if err != nil || id.InstanceID != "i-0abc" || id.AvailabilityZone != "us-east-1a" {
		t.Fatalf("got %+v, %v", id, err)
	}
	noID := []byte(`{"region":"r"}`)
	for _, tc := range []struct {
		name      string
		cert, doc []byte
		sig       string
		code      string
	}{
		{"altered document", s.cert, append([]byte(" "), doc...), sig, muster.EUnauthorized},
		{"another key", newSigner(t).cert, doc, sig, muster.EUnauthorized},
		{"signature not base64", s.cert, doc, "!!", muster.EUnauthorized},
		{"empty signature", s.cert, doc, "", muster.EUnauthorized},
		{"empty document", s.cert, nil, sig, muster.EUnauthorized},
		{"no instance id", s.cert, noID, s.sign(t, noID), muster.EUnauthorized},
		{"not JSON", s.cert, []byte("x"), s.sign(t, []byte("x")), muster.EUnauthorized},
		{"no certificate", []byte("junk"), doc, sig, muster.EInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.VerifyIdentity(tc.cert, tc.doc, tc.sig)
			if muster.ErrorCode(err) != tc.code {
				t.Fatalf("got %v, want code %s", err, tc.code)
			}
		})
	}
}

// An Ed25519 certificate (the sim's) verifies Ed25519 signatures over the
// whole document and refuses an altered one.
// ed25519Signer returns an Ed25519 key and its self-signed certificate,
// as the sim's identity signer.
func ed25519Signer(tb testing.TB) (ed25519.PrivateKey, []byte) {
	tb.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		tb.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestVerifyIdentityEd25519(t *testing.T) {
	key, cert := ed25519Signer(t)
	doc := []byte(`{"instanceId":"i-0ed"}`)
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(key, doc))
	if id, err := auth.VerifyIdentity(cert, doc, sig); err != nil || id.InstanceID != "i-0ed" {
		t.Fatalf("got %+v, %v", id, err)
	}
	if _, err := auth.VerifyIdentity(cert, []byte(`{"instanceId":"i-1ed"}`), sig); muster.ErrorCode(err) != muster.EUnauthorized {
		t.Fatalf("altered document: got %v, want unauthorized", err)
	}
}

func FuzzVerifyIdentity(f *testing.F) {
	s := newSigner(f)
	doc := []byte(`{"instanceId":"i-1"}`)
	f.Add(doc, s.sign(f, doc))
	f.Add([]byte(`{"instanceId":`), "AAAA")
	f.Fuzz(func(t *testing.T, doc []byte, sig string) {
		id, err := auth.VerifyIdentity(s.cert, doc, sig)
		if err == nil && id.InstanceID == "" {
			t.Fatalf("accepted a document without an instance id")
		}
		if err != nil && muster.ErrorCode(err) != muster.EUnauthorized {
			t.Fatalf("got code %s for a bad document or signature", muster.ErrorCode(err))
		}
	})
}

// BenchmarkVerifyIdentityEd25519 is one enrolment's signature check with
// the sim's kind of certificate (an Ed25519 key).
func BenchmarkVerifyIdentityEd25519(b *testing.B) {
	key, cert := ed25519Signer(b)
	doc := []byte(`{"instanceId":"i-0ed","region":"sim","availabilityZone":"a","imageId":"ami-1","instanceType":"m.small","accountId":"000000000000","architecture":"amd64","pendingTime":"2026-12-04T00:00:00Z","privateIp":"10.0.0.1"}`)
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(key, doc))
	for b.Loop() {
		if _, err := auth.VerifyIdentity(cert, doc, sig); err != nil {
			b.Fatal(err)
		}
	}
}
