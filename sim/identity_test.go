package sim_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/sim"
)

func TestIdentityDocumentsVerifyAcrossRestartAndRefuseTampering(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sim.json")
	c, err := sim.Open(sim.Config{Clock: newClock(), StateFile: file})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := c.AddInstance("b", testController, testModel)
	if err != nil {
		t.Fatal(err)
	}
	doc, sig, err := c.IdentityDocument(inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	cert := c.IdentityCert()
	id, err := auth.VerifyIdentity(cert, doc, sig)
	if err != nil {
		t.Fatalf("VerifyIdentity: %v", err)
	}
	// The signature is standard Ed25519: crypto/ed25519 verifies it.
	block, _ := pem.Decode(cert)
	parsed, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if pub, ok := parsed.PublicKey.(ed25519.PublicKey); !ok || err != nil || !ed25519.Verify(pub, doc, raw) {
		t.Fatalf("crypto/ed25519 refuses the signature %q (key %T, %v)", sig, parsed.PublicKey, err)
	}
	if id.InstanceID != inst.ID || id.AvailabilityZone != "b" || id.AccountID != sim.AccountID || id.PrivateIP != inst.Addresses[0] ||
		id.InstanceType != inst.InstanceType || !id.PendingTime.Equal(inst.Created) {
		t.Fatalf("document %+v does not describe instance %+v", id, inst)
	}
	for _, k := range []string{"instanceId", "region", "availabilityZone", "imageId", "instanceType", "accountId", "pendingTime", "privateIp"} {
		if !bytes.Contains(doc, []byte(`"`+k+`"`)) {
			t.Errorf("document lacks EC2's key %s: %s", k, doc)
		}
	}
	forged := bytes.Replace(doc, []byte(inst.ID), []byte("i-someoneelse"), 1)
	if _, err := auth.VerifyIdentity(cert, forged, sig); muster.ErrorCode(err) != muster.EUnauthorized {
		t.Fatalf("an altered document: got %v, want unauthorized", err)
	}
	if _, _, err := c.IdentityDocument("i-missing"); muster.ErrorCode(err) != muster.ENotFound {
		t.Fatalf("unknown instance: got %v, want not-found", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// The restarted sim signs with the same key: the old certificate
	// verifies its new documents.
	c2 := openCloud(t, sim.Config{Clock: newClock(), StateFile: file})
	doc2, sig2, err := c2.IdentityDocument(inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.VerifyIdentity(cert, doc2, sig2); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	// Another sim's key does not verify them.
	other := openCloud(t, sim.Config{Clock: newClock()})
	if _, err := auth.VerifyIdentity(other.IdentityCert(), doc2, sig2); muster.ErrorCode(err) != muster.EUnauthorized {
		t.Fatalf("another sim's certificate: got %v, want unauthorized", err)
	}
}

// An identity signed ahead (PrepareIdentity, as the controller asks when
// an instance with an agent starts) is the one IdentityDocument serves:
// each instance's own, verifying, and the same bytes as when signed on
// demand.
func TestIdentitySignedAhead(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	var insts []sim.Instance
	for range 2 {
		inst, err := c.AddInstance("a", testController, testModel)
		if err != nil {
			t.Fatal(err)
		}
		insts = append(insts, inst)
		c.PrepareIdentity(inst.ID)
	}
	c.PrepareIdentity("i-missing") // ignored
	for _, inst := range insts {
		doc, sig, err := c.IdentityDocument(inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		id, err := auth.VerifyIdentity(c.IdentityCert(), doc, sig)
		if err != nil || id.InstanceID != inst.ID || id.PrivateIP != inst.Addresses[0] {
			t.Fatalf("instance %s's document signed ahead: %+v, %v", inst.ID, id, err)
		}
		again, sig2, err := c.IdentityDocument(inst.ID)
		if err != nil || !bytes.Equal(again, doc) || sig2 != sig {
			t.Fatalf("instance %s's document signed on demand differs from the one signed ahead: %v\n%s\n%s", inst.ID, err, again, doc)
		}
	}
	if _, _, err := c.IdentityDocument("i-missing"); muster.ErrorCode(err) != muster.ENotFound {
		t.Fatalf("unknown instance after PrepareIdentity: got %v, want not-found", err)
	}
}

// A new sim signs with Ed25519; a state file from before, with an ECDSA
// key, keeps that key: its documents still verify with its certificate.
func TestIdentityKeyOfAnOlderStateFile(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	if k := identityKeyType(t, c.IdentityCert()); k != "ed25519.PublicKey" {
		t.Fatalf("new sim's identity key %s, want ed25519", k)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// A state file as an earlier sim left it: its key swapped for ECDSA.
	file := filepath.Join(t.TempDir(), "sim.json")
	first, err := sim.Open(sim.Config{Clock: newClock(), StateFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	st["identity-key"] = string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if b, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	old := openCloud(t, sim.Config{Clock: newClock(), StateFile: file})
	if k := identityKeyType(t, old.IdentityCert()); k != "*ecdsa.PublicKey" {
		t.Fatalf("older state file's identity key %s, want its ECDSA key", k)
	}
	inst, err := old.AddInstance("a", testController, testModel)
	if err != nil {
		t.Fatal(err)
	}
	doc, sig, err := old.IdentityDocument(inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := auth.VerifyIdentity(old.IdentityCert(), doc, sig); err != nil || id.InstanceID != inst.ID {
		t.Fatalf("document signed with the older key: %+v %v", id, err)
	}
}

func identityKeyType(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("identity certificate is not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%T", c.PublicKey)
}

// The sim serves an instance's identity as EC2's metadata service does
// (IMDSv2: a PUT for a token, then GETs with it) and its certificate.
func TestIdentityServedLikeIMDS(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	inst, err := c.AddInstance("a", testController, testModel)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim.NewServer(c))
	defer ts.Close()
	do := func(method, path string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	base := sim.IMDSPrefix + inst.ID + "/latest"
	code, tok := do("PUT", base+"/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "300"})
	if code != 200 || tok == "" {
		t.Fatalf("token: %d %q", code, tok)
	}
	if code, _ := do("GET", base+"/dynamic/instance-identity/document", nil); code != http.StatusUnauthorized {
		t.Fatalf("document without a token: got %d, want 401", code)
	}
	h := map[string]string{"X-aws-ec2-metadata-token": tok}
	_, doc := do("GET", base+"/dynamic/instance-identity/document", h)
	_, sig := do("GET", base+"/dynamic/instance-identity/signature", h)
	_, cert := do("GET", "/v1/identity-cert", nil)
	id, err := auth.VerifyIdentity([]byte(cert), []byte(doc), sig)
	if err != nil || id.InstanceID != inst.ID {
		t.Fatalf("served identity: %+v, %v", id, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil || m["instanceId"] != inst.ID {
		t.Fatalf("served document %s", doc)
	}
	if code, _ := do("GET", sim.IMDSPrefix+"i-nope/latest/dynamic/instance-identity/document", h); code != http.StatusNotFound {
		t.Fatalf("unknown instance: got %d, want 404", code)
	}
	if code, _ := do("GET", base+"/dynamic/instance-identity/pkcs8", h); code != http.StatusNotFound {
		t.Fatalf("unknown item: got %d, want 404", code)
	}
	if !strings.HasPrefix(cert, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("certificate: %q", cert)
	}
}

// A file written on an instance's disk is journalled as the file alone
// and is there again when the sim reopens its state file (as after a
// crash: no snapshot at close).
func TestWrittenFileJournalled(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sim.json")
	c := openCloud(t, sim.Config{Clock: newClock(), StateFile: file})
	inst, err := c.AddInstance("a", testController, testModel)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(inst.ID, "/etc/agent.conf", []byte("enrolled")); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile("i-missing", "/x", nil); muster.ErrorCode(err) != muster.ENotFound {
		t.Fatalf("file on an unknown instance: %v, want not-found", err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, `{"file":`) {
		t.Fatalf("last journal record %.80s…, want the file alone", last)
	}
	copyFile := filepath.Join(t.TempDir(), "sim.json")
	if err := os.WriteFile(copyFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c2 := openCloud(t, sim.Config{Clock: newClock(), StateFile: copyFile})
	if got, ok := c2.ReadFile(inst.ID, "/etc/agent.conf"); !ok || string(got) != "enrolled" {
		t.Fatalf("after reopening: %q %v, want the file", got, ok)
	}
}
