package sim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"time"

	"github.com/musterhq/muster"
	voied "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Instance identity (SPEC §4): like EC2, the sim signs each instance's
// identity document with a key of its own, kept in the state file so that
// documents verify across its restarts, and publishes the key's
// certificate. Batch-started agents prove which instance they run on with
// it.

// AccountID is the sim's account, in identity documents and EC2 owner ids.
const AccountID = "111122223333"

// IdentityRegion is the region named in the sim's identity documents.
const IdentityRegion = "sim-1"

// identity is the sim's signing key and its self-signed certificate.
type identity struct {
	key     crypto.Signer // ed25519.PrivateKey, or an older state file's *ecdsa.PrivateKey
	keyPEM  string
	certPEM []byte
}

// loadIdentity parses keyPEM, or makes a new key when it is empty. New
// keys are Ed25519 (a third of ECDSA P-256's signing time: 10,000
// simulated agents ask for their documents at once); a state file's
// ECDSA key, from before, keeps signing.
func loadIdentity(keyPEM string, now time.Time) (*identity, error) {
	var key crypto.Signer
	if keyPEM == "" {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("sim: identity key: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, fmt.Errorf("sim: identity key: %w", err)
		}
		key, keyPEM = k, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	} else {
		block, _ := pem.Decode([]byte(keyPEM))
		if block == nil {
			return nil, muster.Errorf(muster.EInvalid, "sim: identity key is not PEM")
		}
		var err error
		if key, err = parseIdentityKey(block); err != nil {
			return nil, muster.Errorf(muster.EInvalid, "sim: identity key: %v", err)
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "muster sim instance identity"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sim: identity certificate: %w", err)
	}
	return &identity{key: key, keyPEM: keyPEM, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// parseIdentityKey reads an Ed25519 PKCS #8 key or an ECDSA key.
func parseIdentityKey(block *pem.Block) (crypto.Signer, error) {
	if block.Type == "EC PRIVATE KEY" {
		return x509.ParseECPrivateKey(block.Bytes)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	switch k := k.(type) {
	case ed25519.PrivateKey:
		return k, nil
	case *ecdsa.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T", k)
}

// sign signs doc: Ed25519 over the document, ECDSA over its SHA-256.
func (id *identity) sign(doc []byte) ([]byte, error) {
	if k, ok := id.key.(ed25519.PrivateKey); ok {
		// The same signature crypto/ed25519 makes (Ed25519 is
		// deterministic), in half its time.
		return voied.Sign(voied.PrivateKey(k), doc), nil
	}
	sum := sha256.Sum256(doc)
	return id.key.Sign(rand.Reader, sum[:], crypto.SHA256)
}

// IdentityCert returns the PEM certificate whose key signs the sim's
// instance identity documents (what auth.VerifyIdentity takes).
func (c *Cloud) IdentityCert() []byte { return c.id.certPEM }

// IdentityDocument returns the identity document of instance id as its
// metadata service serves it, and its signature (base64 Ed25519 over the
// document; ECDSA over its SHA-256 with an older state file's key). ENotFound for an unknown instance.
func (c *Cloud) IdentityDocument(id string) (doc []byte, sig string, err error) {
	c.mu.Lock()
	d, ok := c.identityOf(id)
	ahead, signed := c.signed[id]
	delete(c.signed, id)
	c.mu.Unlock()
	if !ok {
		return nil, "", muster.Errorf(muster.ENotFound, "sim: instance %q not found", id)
	}
	if signed && ahead.d == d {
		return ahead.doc, ahead.sig, nil
	}
	return c.signIdentity(d)
}

// signedIdentity is an identity document signed ahead, with what it says.
type signedIdentity struct {
	d   muster.InstanceIdentity
	doc []byte
	sig string
}

// PrepareIdentity signs instance id's identity document ahead of its
// first IdentityDocument, as EC2 has it ready when the instance boots:
// the agents of a burst of starts then find theirs signed. The document
// is kept until that first call (or the instance goes); a later call
// signs again (the same document; with Ed25519 the same signature too).
// An unknown instance is ignored.
func (c *Cloud) PrepareIdentity(id string) {
	c.mu.Lock()
	d, ok := c.identityOf(id)
	c.mu.Unlock()
	if !ok {
		return
	}
	doc, sig, err := c.signIdentity(d)
	if err != nil {
		return // IdentityDocument signs again and says why
	}
	c.mu.Lock()
	if _, ok := c.instances[id]; ok {
		c.signed[id] = signedIdentity{d, doc, sig}
	}
	c.mu.Unlock()
}

// identityOf is what instance id's identity document says; c.mu is held.
func (c *Cloud) identityOf(id string) (muster.InstanceIdentity, bool) {
	inst := c.instances[id]
	if inst == nil {
		return muster.InstanceIdentity{}, false
	}
	d := muster.InstanceIdentity{InstanceID: inst.ID, Region: IdentityRegion, AvailabilityZone: inst.Zone,
		InstanceType: inst.InstanceType, AccountID: AccountID, Architecture: inst.Arch,
		PendingTime: inst.Created.UTC()}
	if inst.EC2 != nil {
		d.ImageID = inst.EC2.ImageID
	}
	if len(inst.Addresses) > 0 {
		d.PrivateIP = inst.Addresses[0]
	}
	return d, true
}

// signIdentity makes the document d and signs it.
func (c *Cloud) signIdentity(d muster.InstanceIdentity) (doc []byte, sig string, err error) {
	if doc, err = json.MarshalIndent(d, "", "  "); err != nil {
		return nil, "", err
	}
	raw, err := c.id.sign(doc)
	if err != nil {
		return nil, "", fmt.Errorf("sim: sign identity document: %w", err)
	}
	return doc, base64.StdEncoding.EncodeToString(raw), nil
}

// IMDSPrefix is where the sim serves each instance's metadata the way
// EC2's metadata service does at http://169.254.169.254/latest: an agent
// with metadata-url http://SIM/imds/ID/latest reads instance ID's.
const IMDSPrefix = "/imds/"

// identityCert serves GET /v1/identity-cert.
func (s *server) identityCert(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Write(s.c.IdentityCert())
}

// imdsToken serves PUT /imds/{id}/latest/api/token: IMDSv2's session
// token, which the GETs must present.
func (s *server) imdsToken(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
		http.Error(w, "missing X-aws-ec2-metadata-token-ttl-seconds", http.StatusBadRequest)
		return
	}
	w.Write([]byte(muster.NewSecret()))
}

// imdsIdentity serves GET /imds/{id}/latest/dynamic/instance-identity/{document,signature}.
func (s *server) imdsIdentity(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-aws-ec2-metadata-token") == "" {
		http.Error(w, "IMDSv2 token required", http.StatusUnauthorized)
		return
	}
	what := r.PathValue("what")
	doc, sig, err := s.c.IdentityDocument(r.PathValue("id"))
	if err != nil || (what != "document" && what != "signature") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	if what == "signature" {
		w.Write([]byte(sig))
		return
	}
	w.Write(doc)
}

// WriteFile writes data at path on the disk of instance id, as a process
// on the instance would (an enrolled agent keeps its credentials so): it
// survives the instance's stops and the sim's restarts and goes with the
// instance. ENotFound for an unknown instance.
func (c *Cloud) WriteFile(id, path string, data []byte) error {
	c.mu.Lock()
	inst := c.instances[id]
	if inst == nil {
		c.mu.Unlock()
		return muster.Errorf(muster.ENotFound, "sim: instance %q not found", id)
	}
	if c.files[id] == nil {
		c.files[id] = map[string][]byte{}
	}
	c.files[id][path] = append([]byte(nil), data...)
	c.logFile(id, path, c.files[id][path])
	c.mu.Unlock()
	c.persist()
	return nil
}

// ReadFile returns what WriteFile wrote at path on instance id's disk.
func (c *Cloud) ReadFile(id, path string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.files[id][path]
	return append([]byte(nil), b...), ok
}
