package auth

import (
	"crypto/ed25519"
	"crypto/x509"
	"testing"
)

// FuzzEd25519SameAsStdlib: the identity check accepts exactly the Ed25519
// signatures crypto/ed25519 (what crypto/x509 uses) accepts, among them
// the edge cases where verifiers differ: a small-order key and R, a
// non-canonical S, a key that is no curve point.
func FuzzEd25519SameAsStdlib(f *testing.F) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		f.Fatal(err)
	}
	msg := []byte(`{"instanceId":"i-1"}`)
	sig := ed25519.Sign(key, msg)
	f.Add([]byte(pub), msg, sig)
	// S + L: the same point, a non-canonical scalar (refused by both).
	nonCanonical := append([]byte(nil), sig...)
	addL(nonCanonical[32:])
	f.Add([]byte(pub), msg, nonCanonical)
	// The identity as key and as R with S = 0: [0]B - [k]A = R for any
	// message, which crypto/ed25519 accepts (cofactorless, small order
	// allowed) and stricter verifiers refuse.
	identity := make([]byte, 32)
	identity[0] = 1
	f.Add(identity, msg, append(append([]byte(nil), identity...), make([]byte, 32)...))
	// A key that decodes to no point.
	bad := make([]byte, 32)
	bad[0] = 2
	f.Add(bad, msg, sig)
	f.Fuzz(func(t *testing.T, pub, msg, sig []byte) {
		if len(pub) != ed25519.PublicKeySize {
			return // a certificate's Ed25519 key is always 32 bytes
		}
		ic := &identityCert{cert: &x509.Certificate{PublicKey: ed25519.PublicKey(pub)}, algo: x509.PureEd25519, ed: expandEd25519(pub)}
		if got, want := checkIdentitySignature(ic, msg, sig), ed25519.Verify(pub, msg, sig); got != want {
			t.Fatalf("key %x, message %q, signature %x: got %v, crypto/ed25519 says %v", pub, msg, sig, got, want)
		}
	})
}

// addL adds the group order L to the little-endian 256-bit scalar s.
func addL(s []byte) {
	l := [32]byte{0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}
	carry := 0
	for i := range s {
		v := int(s[i]) + int(l[i]) + carry
		s[i], carry = byte(v), v>>8
	}
}
