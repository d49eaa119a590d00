package muster

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"sync/atomic"
	"time"

	voied "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Batch enrolment (SPEC §4): instances of one batch start share their user
// data, so it carries no per-machine secret, only a one-time enrolment
// token of the batch. Each instance proves which instance it is with its
// cloud-signed identity document, and the controller hands it the
// credentials of the machine recorded with that instance, once.

// InstanceIdentity is a cloud's instance identity document, in EC2's
// shape (what /latest/dynamic/instance-identity/document returns).
type InstanceIdentity struct {
	InstanceID       string    `json:"instanceId"`
	Region           string    `json:"region"`
	AvailabilityZone string    `json:"availabilityZone"`
	ImageID          string    `json:"imageId"`
	InstanceType     string    `json:"instanceType"`
	AccountID        string    `json:"accountId"`
	Architecture     string    `json:"architecture"`
	PendingTime      time.Time `json:"pendingTime"`
	PrivateIP        string    `json:"privateIp"`
}

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
		return nil, Errorf(EInvalid, "instance identity certificate: no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, Errorf(EInvalid, "instance identity certificate: %v", err)
	}
	ic := &identityCert{pem: string(cert), cert: c}
	switch c.PublicKey.(type) {
	case *rsa.PublicKey:
		ic.algo = x509.SHA256WithRSA
	case *ecdsa.PublicKey:
		ic.algo = x509.ECDSAWithSHA256
	case ed25519.PublicKey:
		ic.algo = x509.PureEd25519
		ic.ed = expandEd25519(c.PublicKey.(ed25519.PublicKey))
	default:
		return nil, Errorf(EInvalid, "instance identity certificate: unsupported key type %T", c.PublicKey)
	}
	lastIdentityCert.Store(ic)
	return ic, nil
}

// maxIdentityDocument bounds an identity document; EC2's are under 1 KiB.
const maxIdentityDocument = 4096

// VerifyIdentity checks that sig (base64, as the metadata service serves
// it) is the signature of doc by the key of the PEM certificate cert
// (SHA-256 with RSA PKCS #1 v1.5 or ECDSA, or Ed25519 over the document,
// by the certificate's key) and
// returns the document. EUnauthorized for a bad signature or document,
// EInvalid for a bad certificate.
func VerifyIdentity(cert []byte, doc []byte, sig string) (InstanceIdentity, error) {
	ic, err := parseIdentityCert(cert)
	if err != nil {
		return InstanceIdentity{}, err
	}
	if len(doc) == 0 || len(doc) > maxIdentityDocument {
		return InstanceIdentity{}, Errorf(EUnauthorized, "instance identity document is empty or longer than %d bytes", maxIdentityDocument)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(sig), ""))
	if err != nil || len(raw) == 0 {
		return InstanceIdentity{}, Errorf(EUnauthorized, "instance identity signature is not base64")
	}
	if !checkIdentitySignature(ic, doc, raw) {
		return InstanceIdentity{}, Errorf(EUnauthorized, "instance identity signature does not verify")
	}
	var id InstanceIdentity
	if err := json.Unmarshal(doc, &id); err != nil {
		return InstanceIdentity{}, Errorf(EUnauthorized, "instance identity document: %v", err)
	}
	if id.InstanceID == "" {
		return InstanceIdentity{}, Errorf(EUnauthorized, "instance identity document names no instance")
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

// EnrolmentStore keeps the enrolment tokens of batch starts. Methods are
// safe for concurrent use.
type EnrolmentStore interface {
	// SetEnrolment records tokenHash (HashSecret of a batch's enrolment
	// token) for the named machines, with the credentials not handed out
	// yet. A machine's few previous tokens stay valid (the instance of a
	// crashed start, adopted by a repeat in another batch, carries its own
	// batch's); what binds an instance to a machine is its recorded
	// instance id. Missing machines are ignored; ENotFound for an unknown
	// model.
	SetEnrolment(ctx context.Context, modelUUID string, machineIDs []string, tokenHash string) error
	// Enrol hands out the credentials of each enrolment's machine, once,
	// to the instance recorded for it, all in one transaction (agents
	// enrolling together cost one): for each it checks that InstanceID is
	// the machine's recorded instance and Token one of its enrolment
	// tokens, sets the machine's password hash to PasswordHash and marks
	// the credentials handed out. out[i] is es[i]'s outcome, decided on
	// its own: the machine (its nonce), or ENotFound when there is no such
	// machine; EUnavailable when the machine has no instance recorded yet
	// but this token is its batch's (the batch's instances are recorded
	// after its start call: try again); EUnauthorized when the instance is
	// another's or the token not the machine's; EConflict when the
	// credentials were handed out already (also by an earlier enrolment
	// of es) or the machine is dead; EInvalid for an enrolment missing a
	// field, or whose Then returned an invalid update or events. err is
	// the transaction's: then nothing changed.
	Enrol(ctx context.Context, modelUUID string, es []Enrolment) (out []Enrolled, err error)
}

// Enrolment is one instance's claim to its machine's credentials.
type Enrolment struct {
	MachineID    string
	InstanceID   string // from its verified identity document
	Token        string // the batch's enrolment token
	PasswordHash string // of the password to hand out
	// Then, when set, is called with the machine (as read, before this
	// enrolment) once the enrolment is granted, inside its transaction:
	// the update it returns (nil for none; its ID is the machine's) and
	// its events, which must be of the enrolment's model, are written in
	// the same transaction, so an agent's enrolment and first report cost
	// one write. Then may run more than once when the transaction is
	// retried; an invalid update or event refuses the enrolment (EInvalid)
	// before anything of it is written.
	Then func(Machine) (*MachineUpdate, []Event)
}

// Enrolled is the outcome of one Enrolment: the machine (with Then's
// update applied), or Err.
type Enrolled struct {
	Machine Machine
	Err     error
}
