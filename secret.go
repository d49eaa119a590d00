package muster

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
)

// NewSecret returns a random 32-byte secret, hex encoded: agent passwords,
// tokens, launch tokens.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// HashSecret hashes a high-entropy secret (from NewSecret) for storage.
// Such secrets need no salt or stretching: guessing them is hopeless.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// SecretMatches reports, in constant time, whether secret hashes to hash.
func SecretMatches(secret, hash string) bool {
	h := HashSecret(secret)
	return subtle.ConstantTimeCompare([]byte(h), []byte(hash)) == 1
}
