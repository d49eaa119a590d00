package auth

import (
	"net/http"
	"strings"

	"github.com/musterhq/muster"
)

// NewToken returns a fresh bearer token and the hash to store for it.
func NewToken() (token, hash string) {
	token = muster.NewSecret()
	return token, muster.HashSecret(token)
}

// TokenMatches reports, in constant time, whether token hashes to hash. An
// empty token or hash never matches.
func TokenMatches(token, hash string) bool {
	if token == "" || hash == "" {
		return false
	}
	return muster.SecretMatches(token, hash)
}

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header, and false when there is none.
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// SetBearerToken sets the Authorization header of r to carry token.
func SetBearerToken(r *http.Request, token string) {
	r.Header.Set("Authorization", "Bearer "+token)
}
