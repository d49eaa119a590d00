package api

import (
	"net/http"
	"os"
	"regexp"

	"github.com/musterhq/muster"
)

// AgentBinaryPath is where GET serves the agent binary of a SHA-256 (hex):
// instances on VM clouds download their agent from it at boot (cloud-init),
// checking the digest. It needs no credentials: the binary is no secret.
const AgentBinaryPath = "/v1/agent-binaries/"

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// handleAgentBinary serves the file Runtime.AgentBinary finds for the
// digest in the path.
func (s *Server) handleAgentBinary(w http.ResponseWriter, r *http.Request) {
	sum := r.PathValue("sha256")
	if !sha256RE.MatchString(sum) {
		s.fail(w, r, muster.Errorf(muster.EInvalid, "agent binary %q: want a SHA-256 in lower-case hex", sum))
		return
	}
	if s.cfg.Runtime == nil {
		s.fail(w, r, muster.Errorf(muster.ENotFound, "no agent binary with SHA-256 %s", sum))
		return
	}
	path, err := s.cfg.Runtime.AgentBinary(sum)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		s.fail(w, r, muster.Errorf(muster.ENotFound, "agent binary %s: %v", sum, err))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "muster", st.ModTime(), f)
}
