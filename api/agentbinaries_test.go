package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

func TestAgentBinaryDownload(t *testing.T) {
	content := []byte("#!agent binary\x00\x01")
	sum := sha256.Sum256(content)
	digest := hex.EncodeToString(sum[:])
	path := filepath.Join(t.TempDir(), "muster")
	if err := os.WriteFile(path, content, 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, withRuntime(&testRuntime{agentBinary: func(s string) (string, error) {
		if s == digest {
			return path, nil
		}
		return "", muster.Errorf(muster.ENotFound, "no agent binary with SHA-256 %s", s)
	}}))
	// No credentials: an instance downloads it at boot.
	resp, err := h.client(t, "").HTTPClient().Get(h.ts.URL + api.AgentBinaryPath + digest)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != string(content) {
		t.Fatalf("GET the binary: %d %q, want 200 and the file", resp.StatusCode, body)
	}
	other := strings.Repeat("0", 64)
	if code, ecode := h.raw(t, http.MethodGet, api.AgentBinaryPath+other, "", nil); code != http.StatusNotFound || ecode != "not-found" {
		t.Errorf("GET an unknown digest: %d %s, want 404 not-found", code, ecode)
	}
	if code, ecode := h.raw(t, http.MethodGet, api.AgentBinaryPath+"..%2fetc%2fpasswd", "", nil); code != http.StatusBadRequest {
		t.Errorf("GET a malformed digest: %d %s, want 400", code, ecode)
	}
}
