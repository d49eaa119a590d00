package api

import (
	"testing"

	"github.com/musterhq/muster"
)

// A session token is recognised as one of ours by every server with the
// same session key (a restarted controller), never by another key, and a
// guess never is.
func TestEndedSessionTokens(t *testing.T) {
	key := []byte("a key that outlives a restart")
	before, after, other := &Server{sessionKey: key}, &Server{sessionKey: key}, &Server{sessionKey: []byte("another")}
	tok, hash := before.newSessionToken()
	if hash != muster.HashSecret(tok) {
		t.Fatalf("got hash %s, want the token's", hash)
	}
	for _, c := range []struct {
		name string
		s    *Server
		tok  string
		want bool
	}{
		{"same key", after, tok, true},
		{"other key", other, tok, false},
		{"a guess", after, muster.NewSecret(), false},
		{"a guess with a tag", after, muster.NewSecret() + "." + tok[len(tok)-22:], false},
	} {
		if got := c.s.endedSession(c.tok); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
