package auth

import (
	"bytes"
	"testing"
	"time"
)

func TestDerivedKey(t *testing.T) {
	now := time.Now()
	a, err := NewCA("a", now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCA("b", now)
	if err != nil {
		t.Fatal(err)
	}
	k := a.DerivedKey("agent passwords")
	if len(k) != 32 {
		t.Fatalf("key of %d bytes, want 32", len(k))
	}
	if !bytes.Equal(k, a.DerivedKey("agent passwords")) {
		t.Error("the same CA and purpose derive different keys")
	}
	if bytes.Equal(k, a.DerivedKey("other")) {
		t.Error("two purposes derive the same key")
	}
	if bytes.Equal(k, b.DerivedKey("agent passwords")) {
		t.Error("two CAs derive the same key")
	}
}
