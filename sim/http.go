package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster"
)

// The HTTP API (JSON bodies; errors are {"error": wireError} with a status):
//
//	GET  /v1/info                         → {"max-batch": N}
//	POST /v1/start         startRequest   → {"outcomes": [wireOutcome]}
//	POST /v1/stop          stopRequest    → {}
//	POST /v1/quarantine    quarantineRequest → {} (stop and tag, R6)
//	POST /v1/restore       quarantineRequest → {} (start and untag)
//	GET  /v1/instances?controller=C&model=M → [muster.Instance]
//	GET  /v1/zones                        → [muster.Zone]
//	GET  /v1/subnets                      → [muster.Subnet]
//	POST /v1/derive-zones  {"params": muster.StartParams} → {"zones": [...]}
//
// and the admin calls, which are neither counted nor limited:
//
//	GET  /v1/admin/zones                  → [ZoneState]
//	PUT  /v1/admin/zones/{name} ZoneUpdate → ZoneState
//	POST /v1/admin/zones/{name}/fail-next {"count": N} → {}
//	GET  /v1/admin/faults                 → Faults
//	PUT  /v1/admin/faults  Faults         → Faults
//	GET  /v1/admin/instances              → [Instance]
//	POST /v1/admin/instances NewInstance  → Instance
//	POST /v1/admin/remove  {"ids": [...]} → {"removed": N}
//	GET  /v1/admin/stats                  → Stats
//	POST /v1/admin/stats/reset            → {}
//
// (sim/simserver mounts the EC2 Query API of sim/ec2api beside it.)

type startRequest struct {
	Controller string               `json:"controller"`
	Model      string               `json:"model"`
	Params     []muster.StartParams `json:"params"`
}

type startResponse struct {
	Outcomes []wireOutcome `json:"outcomes"`
}

type wireOutcome struct {
	Result *muster.StartResult `json:"result,omitempty"`
	Error  *wireError          `json:"error,omitempty"`
}

type stopRequest struct {
	Controller string   `json:"controller"`
	Model      string   `json:"model"`
	IDs        []string `json:"ids"`
}

// wireError carries a classified error: Kind for a *muster.ProviderError
// (its String form), Code for a *muster.Error.
type wireError struct {
	Kind    string `json:"kind,omitempty"`
	Zone    string `json:"zone,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	var pe *muster.ProviderError
	if errors.As(err, &pe) {
		return &wireError{Kind: pe.Kind.String(), Zone: pe.Zone, Message: err.Error()}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &wireError{Code: muster.EUnavailable, Message: err.Error()}
	}
	return &wireError{Code: muster.ErrorCode(err), Message: muster.ErrorMessage(err)}
}

var kinds = []muster.ProviderErrorKind{muster.ErrZoneIndependent, muster.ErrCapacity, muster.ErrThrottled, muster.ErrUnavailable, muster.ErrQuota}

func (w *wireError) err() error {
	if w.Kind != "" {
		for _, k := range kinds {
			if k.String() == w.Kind {
				return &muster.ProviderError{Kind: k, Zone: w.Zone, Message: w.Message}
			}
		}
		return &muster.ProviderError{Kind: muster.ErrUnavailable, Zone: w.Zone, Message: w.Message}
	}
	code := w.Code
	if code == "" {
		code = muster.EInternal
	}
	return &muster.Error{Code: code, Message: w.Message}
}

func statusOf(w *wireError) int {
	switch w.Kind {
	case "zone-independent":
		return http.StatusBadRequest
	case "throttled":
		return http.StatusTooManyRequests
	case "":
	default:
		return http.StatusServiceUnavailable
	}
	switch w.Code {
	case muster.EInvalid:
		return http.StatusBadRequest
	case muster.ENotFound:
		return http.StatusNotFound
	case muster.EUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// NewServer returns the HTTP handler serving c's API.
func NewServer(c *Cloud) http.Handler {
	s := &server{c: c}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.info)
	mux.HandleFunc("POST /v1/start", s.start)
	mux.HandleFunc("POST /v1/stop", s.stop)
	mux.HandleFunc("POST /v1/quarantine", s.quarantine)
	mux.HandleFunc("POST /v1/restore", s.restore)
	mux.HandleFunc("GET /v1/instances", s.instances)
	mux.HandleFunc("GET /v1/zones", s.zones)
	mux.HandleFunc("GET /v1/subnets", s.subnets)
	mux.HandleFunc("POST /v1/derive-zones", s.deriveZones)
	mux.HandleFunc("GET /v1/admin/zones", s.adminZones)
	mux.HandleFunc("PUT /v1/admin/zones/{name}", s.adminSetZone)
	mux.HandleFunc("POST /v1/admin/zones/{name}/fail-next", s.adminFailNext)
	mux.HandleFunc("GET /v1/admin/faults", s.adminFaults)
	mux.HandleFunc("PUT /v1/admin/faults", s.adminSetFaults)
	mux.HandleFunc("GET /v1/admin/instances", s.adminInstances)
	mux.HandleFunc("POST /v1/admin/instances", s.adminAddInstance)
	mux.HandleFunc("POST /v1/admin/remove", s.adminRemove)
	mux.HandleFunc("POST /v1/admin/instances/{id}/stop-agent", s.adminStopAgent)
	mux.HandleFunc("GET /v1/admin/stats", s.adminStats)
	mux.HandleFunc("POST /v1/admin/stats/reset", s.adminResetStats)
	mux.HandleFunc("GET /v1/identity-cert", s.identityCert)
	mux.HandleFunc("PUT "+IMDSPrefix+"{id}/latest/api/token", s.imdsToken)
	mux.HandleFunc("GET "+IMDSPrefix+"{id}/latest/dynamic/instance-identity/{what}", s.imdsIdentity)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, muster.Errorf(muster.ENotFound, "sim: no such endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

type server struct{ c *Cloud }

const maxBody = 64 << 20

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		writeErr(w, muster.Errorf(muster.EInvalid, "sim: bad request body: %v", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrReplyLost) {
		dropConnection(w)
		return
	}
	we := toWire(err)
	writeJSON(w, statusOf(we), map[string]*wireError{"error": we})
}

// dropConnection closes the connection of w without a response (a lost
// reply, Faults.LoseReplies).
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2, or a writer that cannot be hijacked: abort the
		// response, which net/http does without logging.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]int{"max-batch": s.c.MaxBatch()})
}

func (s *server) start(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	if !decode(w, r, &req) {
		return
	}
	outs, err := s.c.start(r.Context(), req.Controller, req.Model, req.Params)
	if err != nil {
		writeErr(w, err)
		return
	}
	resp := startResponse{Outcomes: make([]wireOutcome, len(outs))}
	for i, o := range outs {
		if o.Err != nil {
			resp.Outcomes[i].Error = toWire(o.Err)
		} else {
			res := o.Result
			resp.Outcomes[i].Result = &res
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *server) stop(w http.ResponseWriter, r *http.Request) {
	var req stopRequest
	if !decode(w, r, &req) {
		return
	}
	reply(w, struct{}{}, s.c.stop(r.Context(), req.Controller, req.Model, req.IDs))
}

func (s *server) instances(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	insts, err := s.c.list(r.Context(), q.Get("controller"), q.Get("model"))
	reply(w, insts, err)
}

func (s *server) zones(w http.ResponseWriter, r *http.Request) {
	zs, err := s.c.listZones(r.Context())
	reply(w, zs, err)
}

func (s *server) subnets(w http.ResponseWriter, r *http.Request) {
	ss, err := s.c.listSubnets(r.Context())
	reply(w, ss, err)
}

func (s *server) deriveZones(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Params muster.StartParams `json:"params"`
	}
	if !decode(w, r, &req) {
		return
	}
	zs, err := s.c.deriveZones(r.Context(), req.Params)
	reply(w, map[string][]string{"zones": zs}, err)
}

func (s *server) adminZones(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.c.Zones())
}

func (s *server) adminSetZone(w http.ResponseWriter, r *http.Request) {
	var u ZoneUpdate
	if !decode(w, r, &u) {
		return
	}
	zs, err := s.c.SetZone(r.PathValue("name"), u)
	reply(w, zs, err)
}

func (s *server) adminFailNext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Count int `json:"count"`
	}
	if !decode(w, r, &req) {
		return
	}
	reply(w, struct{}{}, s.c.FailNext(r.PathValue("name"), req.Count))
}

func (s *server) adminFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.c.Faults())
}

func (s *server) adminSetFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if !decode(w, r, &f) {
		return
	}
	if err := s.c.SetFaults(f); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.c.Faults())
}

func (s *server) adminInstances(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.c.AllInstances())
}

func (s *server) adminAddInstance(w http.ResponseWriter, r *http.Request) {
	var n NewInstance
	if !decode(w, r, &n) {
		return
	}
	inst, err := s.c.CreateInstance(n)
	reply(w, inst, err)
}

func (s *server) adminRemove(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs []string `json:"ids"`
	}
	if !decode(w, r, &req) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"removed": s.c.RemoveInstances(req.IDs...)})
}

func (s *server) adminStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.c.Stats())
}

func (s *server) adminResetStats(w http.ResponseWriter, r *http.Request) {
	s.c.ResetStats()
	writeJSON(w, http.StatusOK, struct{}{})
}

// Client talks to a sim server (`muster sim serve`). It is safe for
// concurrent use.
type Client struct {
	base     string
	hc       *http.Client
	maxBatch atomic.Int64
}

// NewClient returns a client of the sim server at baseURL (e.g.
// "http://127.0.0.1:7070"); a nil httpClient means one that keeps up to
// 256 idle connections to the server, for many concurrent calls.
func NewClient(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{}
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			tr := dt.Clone()
			tr.MaxIdleConnsPerHost = 256
			httpClient.Transport = tr
		}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: httpClient}
}

// Provider returns the provider of a controller and model on the server's
// cloud; it behaves as the in-process one, errors classified alike.
func (c *Client) Provider(controllerUUID, modelUUID string) *Provider {
	return &Provider{b: c, controller: controllerUUID, model: modelUUID}
}

// do sends a request; in and out are JSON bodies (either may be nil).
// Transport failures are ErrUnavailable provider errors; a done ctx gives
// ctx.Err().
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("sim client: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return muster.Errorf(muster.EInvalid, "sim client: %v", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &muster.ProviderError{Kind: muster.ErrUnavailable, Message: "sim client: " + err.Error(), Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &muster.ProviderError{Kind: muster.ErrUnavailable, Message: "sim client: read response: " + err.Error(), Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error *wireError `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != nil {
			return e.Error.err()
		}
		return &muster.ProviderError{Kind: muster.ErrUnavailable, Message: fmt.Sprintf("sim client: %s %s: status %s", method, path, resp.Status)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return &muster.ProviderError{Kind: muster.ErrUnavailable, Message: fmt.Sprintf("sim client: %s %s: bad response: %v", method, path, err)}
		}
	}
	return nil
}

func (c *Client) start(ctx context.Context, controller, model string, ps []muster.StartParams) ([]muster.StartOutcome, error) {
	var resp startResponse
	if err := c.do(ctx, http.MethodPost, "/v1/start", startRequest{controller, model, ps}, &resp); err != nil {
		return nil, err
	}
	outs := make([]muster.StartOutcome, len(resp.Outcomes))
	for i, o := range resp.Outcomes {
		switch {
		case o.Error != nil:
			outs[i].Err = o.Error.err()
		case o.Result != nil:
			outs[i].Result = *o.Result
		default:
			outs[i].Err = muster.NewProviderError(muster.ErrUnavailable, "", "sim client: empty start outcome")
		}
	}
	return outs, nil
}

func (c *Client) stop(ctx context.Context, controller, model string, ids []string) error {
	return c.do(ctx, http.MethodPost, "/v1/stop", stopRequest{controller, model, ids}, nil)
}

func (c *Client) list(ctx context.Context, controller, model string) ([]muster.Instance, error) {
	var out []muster.Instance
	q := url.Values{"controller": {controller}, "model": {model}}
	err := c.do(ctx, http.MethodGet, "/v1/instances?"+q.Encode(), nil, &out)
	return out, err
}

func (c *Client) listZones(ctx context.Context) ([]muster.Zone, error) {
	var out []muster.Zone
	err := c.do(ctx, http.MethodGet, "/v1/zones", nil, &out)
	return out, err
}

func (c *Client) listSubnets(ctx context.Context) ([]muster.Subnet, error) {
	var out []muster.Subnet
	err := c.do(ctx, http.MethodGet, "/v1/subnets", nil, &out)
	return out, err
}

func (c *Client) deriveZones(ctx context.Context, p muster.StartParams) ([]string, error) {
	var out struct {
		Zones []string `json:"zones"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/derive-zones", map[string]any{"params": p}, &out)
	return out.Zones, err
}

// MaxBatch asks the server once for its largest batch (waiting at most 5s);
// DefaultMaxBatch if it cannot be reached.
func (c *Client) MaxBatch() int {
	if n := c.maxBatch.Load(); n > 0 {
		return int(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out struct {
		MaxBatch int `json:"max-batch"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/info", nil, &out); err != nil || out.MaxBatch <= 0 {
		return DefaultMaxBatch
	}
	c.maxBatch.Store(int64(out.MaxBatch))
	return out.MaxBatch
}

// Zones returns the zones with capacity and use.
func (c *Client) Zones(ctx context.Context) ([]ZoneState, error) {
	var out []ZoneState
	err := c.do(ctx, http.MethodGet, "/v1/admin/zones", nil, &out)
	return out, err
}

// SetZone changes (or adds) a zone; see Cloud.SetZone.
func (c *Client) SetZone(ctx context.Context, name string, u ZoneUpdate) (ZoneState, error) {
	var out ZoneState
	err := c.do(ctx, http.MethodPut, "/v1/admin/zones/"+url.PathEscape(name), u, &out)
	return out, err
}

// FailNext makes the next n starts in zone fail with ErrCapacity.
func (c *Client) FailNext(ctx context.Context, zone string, n int) error {
	return c.do(ctx, http.MethodPost, "/v1/admin/zones/"+url.PathEscape(zone)+"/fail-next", map[string]int{"count": n}, nil)
}

// Faults returns the current faults.
func (c *Client) Faults(ctx context.Context) (Faults, error) {
	var out Faults
	err := c.do(ctx, http.MethodGet, "/v1/admin/faults", nil, &out)
	return out, err
}

// SetFaults replaces the faults.
func (c *Client) SetFaults(ctx context.Context, f Faults) error {
	return c.do(ctx, http.MethodPut, "/v1/admin/faults", f, nil)
}

// Instances returns every instance of the cloud.
func (c *Client) Instances(ctx context.Context) ([]Instance, error) {
	var out []Instance
	err := c.do(ctx, http.MethodGet, "/v1/admin/instances", nil, &out)
	return out, err
}

// AddInstance adds an instance of no machine; see Cloud.AddInstance.
func (c *Client) AddInstance(ctx context.Context, zone, controller, model string) (Instance, error) {
	return c.CreateInstance(ctx, NewInstance{Zone: zone, Controller: controller, Model: model})
}

// CreateInstance adds an instance as n describes; see Cloud.CreateInstance.
func (c *Client) CreateInstance(ctx context.Context, n NewInstance) (Instance, error) {
	var out Instance
	err := c.do(ctx, http.MethodPost, "/v1/admin/instances", n, &out)
	return out, err
}

// RemoveInstances removes instances whoever owns them; see
// Cloud.RemoveInstances.
func (c *Client) RemoveInstances(ctx context.Context, ids ...string) (int, error) {
	var out struct {
		Removed int `json:"removed"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/admin/remove", map[string][]string{"ids": ids}, &out)
	return out.Removed, err
}

// Stats returns the server cloud's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	err := c.do(ctx, http.MethodGet, "/v1/admin/stats", nil, &out)
	return out, err
}

// ResetStats zeroes the server cloud's call counters.
func (c *Client) ResetStats(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/admin/stats/reset", nil, nil)
}
