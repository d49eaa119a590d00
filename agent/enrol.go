package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// DefaultMetadataURL is EC2's instance metadata service, where an
// enrolling agent reads its identity document unless its config names
// another (metadata-url).
const DefaultMetadataURL = "http://169.254.169.254/latest"

// maxMetadata bounds a metadata answer.
const maxMetadata = 64 << 10

// enrol exchanges the batch token of an enrolment config and the
// instance's signed identity for the machine's credentials (SPEC §4),
// retrying transient failures (the controller unreachable, the instance
// not recorded yet) with backoff. It fails for good when the controller
// refuses (unauthorized, conflict: the credentials were handed out).
func (a *Agent) enrol(ctx context.Context) (*session, error) {
	b := a.newBackoff()
	for {
		res, err := a.tryEnrol(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil {
			a.cfg.Machine, a.cfg.Nonce, a.cfg.Password, a.cfg.EnrolToken = res.Machine, res.Nonce, res.Password, ""
			a.log.Info("agent enrolled")
			if a.opts.OnEnrolled != nil {
				if err := a.opts.OnEnrolled(a.cfg); err != nil {
					a.log.Warn("enrolled credentials not kept", "err", err)
				}
			}
			if res.Session == nil {
				return nil, nil // the agent logs in
			}
			s := a.newSession(a.clients[a.cur], *res.Session)
			s.reported, s.life = res.Reported, res.Life
			return &s, nil
		}
		switch muster.ErrorCode(err) {
		case muster.EUnauthorized, muster.EInvalid, muster.EForbidden, muster.EConflict, muster.ENotFound:
			return nil, fmt.Errorf("enrol as machine %s: %s: %w", a.cfg.Machine, muster.ErrorCode(err), err)
		}
		d := b.next()
		a.log.Warn("agent enrolment failed", "err", err, "retry-in", d)
		if err := a.sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// tryEnrol reads the identity and asks each API address in turn.
func (a *Agent) tryEnrol(ctx context.Context) (api.EnrolResult, error) {
	identity := a.opts.Identity
	if identity == nil {
		identity = func(ctx context.Context) ([]byte, string, error) {
			base := a.cfg.MetadataURL
			if base == "" {
				base = DefaultMetadataURL
			}
			return FetchIdentity(ctx, http.DefaultClient, base)
		}
	}
	doc, sig, err := identity(ctx)
	if err != nil {
		return api.EnrolResult{}, fmt.Errorf("read instance identity: %w", err)
	}
	report := a.startedReport()
	req := api.EnrolRequest{Model: a.cfg.Model, Machine: a.cfg.Machine, Token: a.cfg.EnrolToken, Document: string(doc), Signature: sig, Report: &report}
	var lastErr error
	for i := range a.clients {
		idx := (a.cur + i) % len(a.clients)
		res, err := a.clients[idx].Enrol(ctx, req)
		if err == nil {
			a.cur = idx
			return res, nil
		}
		if code := muster.ErrorCode(err); code != muster.EInternal && code != "" && code != muster.EUnavailable {
			return api.EnrolResult{}, err // the controller answered
		}
		lastErr = err
	}
	return api.EnrolResult{}, lastErr
}

// FetchIdentity reads the instance identity document and its signature
// from an EC2-style metadata service at base (IMDSv2: a session token
// first), e.g. DefaultMetadataURL.
func FetchIdentity(ctx context.Context, hc *http.Client, base string) (doc []byte, sig string, err error) {
	base = strings.TrimRight(base, "/")
	get := func(method, path string, hdr http.Header) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header = hdr
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata))
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("metadata %s %s: %s", method, path, resp.Status)
		}
		return b, nil
	}
	tok, err := get(http.MethodPut, "/api/token", http.Header{"X-Aws-Ec2-Metadata-Token-Ttl-Seconds": {"300"}})
	if err != nil {
		return nil, "", err
	}
	h := http.Header{"X-Aws-Ec2-Metadata-Token": {strings.TrimSpace(string(tok))}}
	if doc, err = get(http.MethodGet, "/dynamic/instance-identity/document", h); err != nil {
		return nil, "", err
	}
	s, err := get(http.MethodGet, "/dynamic/instance-identity/signature", h)
	if err != nil {
		return nil, "", err
	}
	return doc, string(s), nil
}

// SaveConfig writes cfg as JSON to path (mode 0600, through a temporary
// file and a rename): what `muster agent` keeps after enrolling, so that
// it logs in with its own credentials when it starts again.
func SaveConfig(path string, cfg muster.AgentConfig) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("save agent config: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Chmod(0o600)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("save agent config: %w", err)
	}
	return nil
}
