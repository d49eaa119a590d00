package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// URL of the controller, e.g. "https://127.0.0.1:17070".
	URL string
	// CACert is the PEM certificate of the controller's CA; the client
	// trusts only it. Unused when HTTPClient is set.
	CACert []byte
	// Token is the bearer token (admin, or an agent's after Login).
	Token string
	// HTTPClient, when set, is used as is; its transport must trust the
	// controller's certificate. It should have no Timeout, or event
	// streams are cut.
	HTTPClient *http.Client
}

// Client talks to a controller's API. Every method mirrors one API
// operation and returns errors as *muster.Error with the server's code. It
// is safe for concurrent use.
type Client struct {
	base  *url.URL
	hc    *http.Client
	token string
}

// NewClient returns a client for cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, muster.Errorf(muster.EInvalid, "bad controller URL %q: want https://host:port", cfg.URL)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if u.Scheme == "https" {
			if len(cfg.CACert) == 0 {
				return nil, muster.Errorf(muster.EInvalid, "no CA certificate given for %s", cfg.URL)
			}
			tlsCfg, err := auth.ClientTLSConfig(cfg.CACert)
			if err != nil {
				return nil, &muster.Error{Code: muster.EInvalid, Message: err.Error(), Err: err}
			}
			tr.TLSClientConfig = tlsCfg
		}
		hc = &http.Client{Transport: tr}
	}
	return &Client{base: u, hc: hc, token: cfg.Token}, nil
}

// WithToken returns a copy of c that presents token.
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// URL returns the controller's base URL.
func (c *Client) URL() string { return c.base.String() }

// SimURL returns the base URL of the admin API of a model's embedded sim,
// proxied by the controller; use it with HTTPClient.
func (c *Client) SimURL(model string) string {
	return c.base.String() + "/v1/models/" + url.PathEscape(model) + "/sim/"
}

// HTTPClient returns an *http.Client that trusts the controller and adds
// the client's bearer token to every request, for clients of other APIs
// the controller serves (the embedded sim).
func (c *Client) HTTPClient() *http.Client {
	next := c.hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	return &http.Client{Transport: bearerTransport{next: next, token: c.token}, Timeout: c.hc.Timeout, Jar: c.hc.Jar}
}

type bearerTransport struct {
	next  http.RoundTripper
	token string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.token != "" {
		auth.SetBearerToken(r, t.token)
	}
	return t.next.RoundTrip(r)
}

// Do sends a request to path (relative to the controller URL, e.g.
// "/v1/models") with in as JSON body (nil for none) and decodes a JSON
// answer into out (nil to discard it).
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &muster.Error{Code: muster.EInternal, Message: fmt.Sprintf("decode answer to %s %s: %v", method, path, err), Err: err}
	}
	// Read to the end (the answer's closing newline): a body closed
	// before its end closes the connection instead of keeping it for
	// the next request.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return nil
}

// send performs a request; a non-2xx answer becomes *muster.Error.
func (c *Client) send(ctx context.Context, method, path string, in any, header http.Header) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return nil, muster.Errorf(muster.EInvalid, "bad request %s %s: %v", method, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		auth.SetBearerToken(req, c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &muster.Error{Code: muster.EUnavailable, Message: fmt.Sprintf("controller at %s unreachable: %v", c.base.Host, err), Err: err}
	}
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, decodeErrorBody(resp.StatusCode, b)
	}
	return resp, nil
}

func modelPath(model string, rest ...string) string {
	p := "/v1/models/" + url.PathEscape(model)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Models lists every model (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]ModelInfo, error) {
	var out []ModelInfo
	return out, c.Do(ctx, http.MethodGet, "/v1/models", nil, &out)
}

// Model returns one model by name or UUID (GET /v1/models/{model}).
func (c *Client) Model(ctx context.Context, model string) (ModelInfo, error) {
	var out ModelInfo
	return out, c.Do(ctx, http.MethodGet, modelPath(model), nil, &out)
}

// AddModel creates a model (POST /v1/models).
func (c *Client) AddModel(ctx context.Context, req AddModelRequest) (ModelInfo, error) {
	var out ModelInfo
	return out, c.Do(ctx, http.MethodPost, "/v1/models", req, &out)
}

// RemoveModel removes a model without machines (DELETE /v1/models/{model});
// EConflict while it has machines.
func (c *Client) RemoveModel(ctx context.Context, model string) error {
	return c.Do(ctx, http.MethodDelete, modelPath(model), nil, nil)
}

// ModelConfig returns every setting of a model (GET .../config).
func (c *Client) ModelConfig(ctx context.Context, model string) (map[string]string, error) {
	var out map[string]string
	return out, c.Do(ctx, http.MethodGet, modelPath(model, "config"), nil, &out)
}

// SetModelConfig changes settings, all or none, and returns every setting
// afterwards (PATCH .../config).
func (c *Client) SetModelConfig(ctx context.Context, model string, set map[string]string) (map[string]string, error) {
	var out map[string]string
	return out, c.Do(ctx, http.MethodPatch, modelPath(model, "config"), ModelConfigRequest{Set: set}, &out)
}

// AddMachines declares machines and returns their ids (POST .../machines).
func (c *Client) AddMachines(ctx context.Context, model string, req AddMachinesRequest) ([]string, error) {
	var out MachineIDs
	return out.IDs, c.Do(ctx, http.MethodPost, modelPath(model, "machines"), req, &out)
}

// RemoveMachines marks machines dying, or dead with Force (POST
// .../remove-machines). ENotFound if any id is unknown (nothing changes).
func (c *Client) RemoveMachines(ctx context.Context, model string, req RemoveMachinesRequest) error {
	_, err := c.RemoveMachinesIDs(ctx, model, req)
	return err
}

// RemoveMachinesIDs is RemoveMachines that returns the ids of the machines
// it named: with All, every machine the model had.
func (c *Client) RemoveMachinesIDs(ctx context.Context, model string, req RemoveMachinesRequest) ([]string, error) {
	var out MachineIDs
	return out.IDs, c.Do(ctx, http.MethodPost, modelPath(model, "remove-machines"), req, &out)
}

// RetryProvisioning asks for machines in provisioning error to be tried
// again and returns the ids that will be (POST .../retry-provisioning).
func (c *Client) RetryProvisioning(ctx context.Context, model string, req RetryProvisioningRequest) ([]string, error) {
	var out MachineIDs
	return out.IDs, c.Do(ctx, http.MethodPost, modelPath(model, "retry-provisioning"), req, &out)
}

// Status returns the model's status (GET .../status), read in pages of
// MaxPageSize machines.
func (c *Client) Status(ctx context.Context, model string) (Status, error) {
	var out Status
	after := ""
	for first := true; ; first = false {
		q := url.Values{"limit": {strconv.Itoa(MaxPageSize)}}
		if after != "" {
			q.Set("after", after)
		}
		// Each page's machines are decoded straight into the first's map.
		page := Status{Machines: out.Machines}
		if err := c.statusPage(ctx, modelPath(model, "status")+"?"+q.Encode(), &page); err != nil {
			return Status{}, err
		}
		if first {
			out = page
			if out.Machines == nil {
				out.Machines = map[string]MachineStatus{}
			}
		} else {
			out.Machines = page.Machines
		}
		// A server without pages sends everything and no next.
		if page.Next == nil || *page.Next == "" || *page.Next == after {
			out.Next = nil
			return out, nil
		}
		after = *page.Next
	}
}

// statusPage reads one page of the status into page, decoding each
// machine as soon as its bytes are in: a whole-value Decode would wait for
// the page's last byte, so the server's reading and the client's decoding
// would take turns instead of overlapping.
func (c *Client) statusPage(ctx context.Context, path string, page *Status) error {
	resp, err := c.send(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if page.Machines == nil {
		page.Machines = map[string]MachineStatus{}
	}
	if err := decodeStatus(resp.Body, page); err != nil {
		return &muster.Error{Code: muster.EInternal, Message: fmt.Sprintf("decode answer to GET %s: %v", path, err), Err: err}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // keep the connection (see Do)
	return nil
}

// decodeStatus decodes a status object from r into st, its machines one
// by one into st.Machines (which must not be nil).
func decodeStatus(r io.Reader, st *Status) error {
	dec := json.NewDecoder(r)
	delim := func(want json.Delim) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != want {
			return fmt.Errorf("got %v, want %v", tok, want)
		}
		return nil
	}
	if err := delim('{'); err != nil {
		return err
	}
	rest := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if key != "machines" {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return err
			}
			rest[key] = raw
			continue
		}
		switch tok, err := dec.Token(); {
		case err != nil:
			return err
		case tok == nil: // "machines": null, no machines
			continue
		case tok != json.Delim('{'):
			return fmt.Errorf("machines: got %v, want an object", tok)
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			id, _ := tok.(string)
			var m MachineStatus
			if err := dec.Decode(&m); err != nil {
				return fmt.Errorf("machine %q: %w", id, err)
			}
			st.Machines[id] = m
		}
		if err := delim('}'); err != nil {
			return err
		}
	}
	if err := delim('}'); err != nil {
		return err
	}
	b, err := json.Marshal(rest)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, st) // the rest of the fields: machines is not among them
}

// Machines returns one page of the model's machines in full (GET
// .../machines?after=&limit=); after "" is the first page, limit 0 the
// server's default page size.
func (c *Client) Machines(ctx context.Context, model, after string, limit int) (MachineList, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := modelPath(model, "machines")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out MachineList
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// Machine returns one machine in full with its recent events (GET
// .../machines/{id}).
func (c *Client) Machine(ctx context.Context, model, id string) (MachineDetail, error) {
	var out MachineDetail
	return out, c.Do(ctx, http.MethodGet, modelPath(model, "machines", url.PathEscape(id)), nil, &out)
}

// Zones returns the model's zones with machine counts (GET .../zones).
func (c *Client) Zones(ctx context.Context, model string) ([]ZoneInfo, error) {
	var out []ZoneInfo
	return out, c.Do(ctx, http.MethodGet, modelPath(model, "zones"), nil, &out)
}

// Apply converges the model to a fleet, or with DryRun only plans (POST
// .../apply).
func (c *Client) Apply(ctx context.Context, model string, req ApplyRequest) (ApplyResult, error) {
	var out ApplyResult
	return out, c.Do(ctx, http.MethodPost, modelPath(model, "apply"), req, &out)
}

// Events returns a model's events (GET .../events).
func (c *Client) Events(ctx context.Context, model string, q EventQuery) ([]EventInfo, error) {
	var out []EventInfo
	return out, c.Do(ctx, http.MethodGet, modelPath(model, "events")+q.encode(), nil, &out)
}

func (q EventQuery) encode() string {
	v := url.Values{}
	if q.Machine != "" {
		v.Set("machine", q.Machine)
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// Login logs a machine's agent in (POST /v1/agent/login, no token needed).
// Use WithToken(result.Token) for the agent's other calls.
func (c *Client) Login(ctx context.Context, req LoginRequest) (LoginResult, error) {
	var out LoginResult
	return out, c.Do(ctx, http.MethodPost, "/v1/agent/login", req, &out)
}

func agentPath(model, id string, rest ...string) string {
	p := "/v1/agent/models/" + url.PathEscape(model) + "/machines/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// AgentMachine returns the agent's own machine (GET
// /v1/agent/models/{model}/machines/{id}).
func (c *Client) AgentMachine(ctx context.Context, model, id string) (AgentMachine, error) {
	var out AgentMachine
	return out, c.Do(ctx, http.MethodGet, agentPath(model, id), nil, &out)
}

// SetAgentMachine sets the agent's own machine's status, hardware and
// addresses (PUT /v1/agent/models/{model}/machines/{id}).
func (c *Client) SetAgentMachine(ctx context.Context, model, id string, u AgentUpdate) (AgentMachine, error) {
	var out AgentMachine
	return out, c.Do(ctx, http.MethodPut, agentPath(model, id), u, &out)
}

// Heartbeat tells the controller the agent is alive (POST
// .../machines/{id}/heartbeat) and returns the period to keep.
func (c *Client) Heartbeat(ctx context.Context, model, id string) (HeartbeatResult, error) {
	var out HeartbeatResult
	return out, c.Do(ctx, http.MethodPost, agentPath(model, id, "heartbeat"), nil, &out)
}

// FollowOptions says where an event stream starts and what it carries.
type FollowOptions struct {
	Machine string // only this machine's events and changes; "" for all
	After   int64  // start after this seq; 0 replays the whole log
	// Reconnect makes the stream reconnect (resuming after the last seq
	// received) when the connection drops, until ctx ends; errors with a
	// code other than unavailable still end it.
	Reconnect bool
}

// StreamMessage is one item of an event stream: an event of the log, or
// the ids of machines that changed.
type StreamMessage struct {
	Event    *EventInfo // set for a log event
	Machines []string   // set for a machines change
}

// EventStream is a followed event stream.
type EventStream struct {
	c    <-chan StreamMessage
	done chan struct{}
	err  error
}

// C delivers the stream's messages; it is closed when the stream ends.
func (s *EventStream) C() <-chan StreamMessage { return s.c }

// Err says why the stream ended, once C is closed: nil when its context
// ended or the server closed it (without Reconnect).
func (s *EventStream) Err() error {
	<-s.done
	return s.err
}

// FollowEvents follows a model's events over server-sent events (GET
// .../events/stream). The first connection is made before it returns, so
// authentication and model errors come back at once. Cancel ctx to stop.
func (c *Client) FollowEvents(ctx context.Context, model string, opts FollowOptions) (*EventStream, error) {
	last := opts.After
	connect := func() (*http.Response, error) {
		q := url.Values{}
		if opts.Machine != "" {
			q.Set("machine", opts.Machine)
		}
		p := modelPath(model, "events", "stream")
		if len(q) > 0 {
			p += "?" + q.Encode()
		}
		h := http.Header{"Accept": {"text/event-stream"}}
		if last > 0 {
			h.Set("Last-Event-ID", strconv.FormatInt(last, 10))
		}
		return c.send(ctx, http.MethodGet, p, nil, h)
	}
	resp, err := connect()
	if err != nil {
		return nil, err
	}
	ch := make(chan StreamMessage)
	s := &EventStream{c: ch, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(ch)
		backoff := time.Second
		for {
			err := readSSE(ctx, resp.Body, ch, &last)
			resp.Body.Close()
			if ctx.Err() != nil {
				return
			}
			if !opts.Reconnect {
				if err != nil && !errors.Is(err, io.EOF) {
					s.err = err
				}
				return
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
				resp, err = connect()
				if err == nil {
					backoff = time.Second
					break
				}
				if ctx.Err() != nil {
					return
				}
				if code := muster.ErrorCode(err); code != muster.EUnavailable && code != muster.EInternal {
					s.err = err
					return
				}
			}
		}
	}()
	return s, nil
}

// readSSE parses a server-sent-event stream into ch until it ends.
func readSSE(ctx context.Context, body io.Reader, ch chan<- StreamMessage, last *int64) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, event string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			msg, ok, err := sseMessage(id, event, data)
			id, event, data = "", "", nil
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			select {
			case ch <- msg:
			case <-ctx.Done():
				return ctx.Err()
			}
			if msg.Event != nil && msg.Event.Seq > *last {
				*last = msg.Event.Seq
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "event":
			event = value
		case "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}

func sseMessage(id, event string, data []string) (StreamMessage, bool, error) {
	if len(data) == 0 {
		return StreamMessage{}, false, nil
	}
	payload := []byte(strings.Join(data, "\n"))
	switch event {
	case "", "message":
		var e EventInfo
		if err := json.Unmarshal(payload, &e); err != nil {
			return StreamMessage{}, false, fmt.Errorf("decode stream event %s: %w", id, err)
		}
		return StreamMessage{Event: &e}, true, nil
	case MachinesEvent:
		var mc MachinesChange
		if err := json.Unmarshal(payload, &mc); err != nil {
			return StreamMessage{}, false, fmt.Errorf("decode machines change: %w", err)
		}
		return StreamMessage{Machines: mc.Machines}, true, nil
	}
	return StreamMessage{}, false, nil // unknown types are for newer clients
}
