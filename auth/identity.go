package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"sync/atomic"

	"github.com/musterhq/muster"
	voied "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// identityCert is a parsed instance identity certificate and the
// signature algorithm of its key.
type identityCert struct {
	pem  string
	cert *x509.Certificate
	algo x509.SignatureAlgorithm
	// ed is an Ed25519 key, decoded once for a verification twice as
	// fast as crypto/ed25519's (nil for other keys, or a key that is no
	// curve point: crypto/x509 refuses its signatures).
	ed *voied.ExpandedPublicKey
}

// edVerify verifies Ed25519 signatures exactly as crypto/ed25519 does
// (the same signatures accepted and refused; FuzzEd25519SameAsStdlib).
var edVerify = &voied.Options{Verify: voied.VerifyOptionsStdLib}

// lastIdentityCert is the certificate parseIdentityCert parsed last: a
// controller verifies thousands of documents with one cloud's
// certificate, each parse as costly as a fifth of the verification.
var lastIdentityCert atomic.Pointer[identityCert]

// parseIdentityCert parses the PEM certificate cert (EInvalid when it is
// not one, or of an unsupported key type).
func parseIdentityCert(cert []byte) (*identityCert, error) {
	if last := lastIdentityCert.Load(); last != nil && last.pem == string(cert) {
		return last, nil
	}
	block, _ := pem.Decode(cert)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, muster.Errorf(muster.EInvalid, "instance identity certificate: no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, muster.Errorf(muster.EInvalid, "instance identity certificate: %v", err)
	}
	ic := &identityCert{pem: string(cert), cert: c}
	switch k := c.PublicKey.(type) {
	case *rsa.PublicKey:
		ic.algo = x509.SHA256WithRSA
	case *ecdsa.PublicKey:
		ic.algo = x509.ECDSAWithSHA256
	case ed25519.PublicKey:
		ic.algo = x509.PureEd25519
		ic.ed = expandEd25519(k)
	default:
		return nil, muster.Errorf(muster.EInvalid, "instance identity certificate: unsupported key type %T", c.PublicKey)
	}
	lastIdentityCert.Store(ic)
	return ic, nil
}

// maxIdentityDocument bounds an identity document; EC2's are under 1 KiB.
const maxIdentityDocument = 4096

// VerifyIdentity checks that sig (base64, as the metadata service serves
// it) is the signature of doc by the key of the PEM certificate cert
// (SHA-256 with RSA PKCS #1 v1.5 or ECDSA, or Ed25519 over the document)
// and returns the document. EUnauthorized for a bad signature or
// document, EInvalid for a bad certificate.
func VerifyIdentity(cert []byte, doc []byte, sig string) (muster.InstanceIdentity, error) {
	ic, err := parseIdentityCert(cert)
	if err != nil {
		return muster.InstanceIdentity{}, err
	}
	if len(doc) == 0 || len(doc) > maxIdentityDocument {
		return muster.InstanceIdentity{}, muster.Errorf(muster.EUnauthorized, "instance identity document is empty or longer than %d bytes", maxIdentityDocument)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(sig), ""))
	if err != nil || len(raw) == 0 {
		return muster.InstanceIdentity{}, muster.Errorf(muster.EUnauthorized, "instance identity signature is not base64")
	}
	if !checkIdentitySignature(ic, doc, raw) {
		return muster.InstanceIdentity{}, muster.Errorf(muster.EUnauthorized, "instance identity signature does not verify")
	}
	var id muster.InstanceIdentity
	if err := json.Unmarshal(doc, &id); err != nil {
		return muster.InstanceIdentity{}, muster.Errorf(muster.EUnauthorized, "instance identity document: %v", err)
	}
	if id.InstanceID == "" {
		return muster.InstanceIdentity{}, muster.Errorf(muster.EUnauthorized, "instance identity document names no instance")
	}
	return id, nil
}

// expandEd25519 decodes pub for VerifyExpandedWithOptions; nil when it is
// no curve point.
func expandEd25519(pub ed25519.PublicKey) *voied.ExpandedPublicKey {
	k, err := voied.NewExpandedPublicKey(voied.PublicKey(pub))
	if err != nil {
		return nil
	}
	return k
}

// checkIdentitySignature reports whether sig is the signature of doc by
// the key of ic.
func checkIdentitySignature(ic *identityCert, doc, sig []byte) bool {
	if ic.ed != nil {
		return voied.VerifyExpandedWithOptions(ic.ed, doc, sig, edVerify)
	}
	return ic.cert.CheckSignature(ic.algo, doc, sig) == nil
}
