package lxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultSocket is where Debian's lxd package listens.
const DefaultSocket = "/var/lib/lxd/unix.socket"

// Client is a minimal client of LXD's REST API (/1.0) on its unix socket:
// what the provider needs of instances, operations, networks, storage
// volumes, images and resources. It is safe for concurrent use.
type Client struct {
	hc *http.Client
}

// NewClient returns a client of the LXD daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{hc: &http.Client{Transport: tr}}
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// APIError is an error response of the daemon.
type APIError struct {
	Status  int    // HTTP status, e.g. 404
	Message string // LXD's error text
	What    string // the request, e.g. "GET /1.0/instances/x"
}

func (e *APIError) Error() string {
	return fmt.Sprintf("lxd: %s: %s (%d)", e.What, e.Message, e.Status)
}

// IsNotFound reports whether err is an LXD 404.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// IsConflict reports whether err is an LXD 409 (e.g. a name in use).
func IsConflict(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict
}

// response is LXD's envelope of every answer.
type response struct {
	Type       string          `json:"type"` // sync, async, error
	Status     string          `json:"status"`
	StatusCode int             `json:"status_code"`
	Operation  string          `json:"operation"`
	ErrorCode  int             `json:"error_code"`
	Error      string          `json:"error"`
	Metadata   json.RawMessage `json:"metadata"`
}

// Operation is a background operation of the daemon.
type Operation struct {
	ID         string         `json:"id"`
	Class      string         `json:"class"`
	Status     string         `json:"status"`
	StatusCode int            `json:"status_code"`
	Err        string         `json:"err"`
	Metadata   map[string]any `json:"metadata"`
}

// do sends a request and decodes the envelope. body is JSON-encoded unless
// it is an io.Reader, which is sent as it is.
func (c *Client) do(ctx context.Context, method, path string, body any) (*response, error) {
	what := method + " " + path
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd, ctype = b, "application/octet-stream"
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("lxd: %s: encode: %w", what, err)
		}
		rd, ctype = bytes.NewReader(buf), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://lxd"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("lxd: %s: %w", what, err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("lxd: %s: %w", what, ctx.Err())
		}
		return nil, fmt.Errorf("lxd: %s: %w", what, err)
	}
	defer resp.Body.Close()
	var r response
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&r); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("lxd: %s: %w", what, ctx.Err())
		}
		return nil, &APIError{Status: resp.StatusCode, Message: "undecodable response: " + err.Error(), What: what}
	}
	if r.Type == "error" || resp.StatusCode >= 400 {
		code := r.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		return nil, &APIError{Status: code, Message: r.Error, What: what}
	}
	return &r, nil
}

// get decodes a sync answer's metadata into out.
func (c *Client) get(ctx context.Context, path string, out any) error {
	r, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(r.Metadata, out); err != nil {
		return fmt.Errorf("lxd: GET %s: decode: %w", path, err)
	}
	return nil
}

// call sends a request and, when the answer is an operation, waits for it
// to end. It returns the operation (nil for a sync answer).
func (c *Client) call(ctx context.Context, method, path string, body any) (*Operation, error) {
	r, err := c.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if r.Type != "async" {
		return nil, nil
	}
	var op Operation
	if err := json.Unmarshal(r.Metadata, &op); err != nil {
		return nil, fmt.Errorf("lxd: %s %s: decode operation: %w", method, path, err)
	}
	return c.Wait(ctx, op.ID, method+" "+path)
}

// Wait waits for operation id to end; an operation that fails is an
// *APIError with the operation's error. what names the request for errors.
func (c *Client) Wait(ctx context.Context, id, what string) (*Operation, error) {
	for {
		var op Operation
		// The daemon holds the request up to timeout seconds; a cancelled
		// ctx ends it at once.
		if err := c.get(ctx, "/1.0/operations/"+url.PathEscape(id)+"/wait?timeout=30", &op); err != nil {
			return nil, err
		}
		switch op.Status {
		case "Success":
			return &op, nil
		case "Failure", "Cancelled":
			return &op, &APIError{Status: opStatus(op), Message: op.Err, What: what}
		}
	}
}

// opStatus maps a failed operation to an HTTP-like status: LXD reports
// only text, so a failure is a 500 unless the text says otherwise.
func opStatus(op Operation) int {
	if strings.Contains(strings.ToLower(op.Err), "not found") {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// Resources is the part of GET /1.0/resources the provider uses.
type Resources struct {
	CPU struct {
		Architecture string `json:"architecture"` // e.g. x86_64
		Total        uint64 `json:"total"`
	} `json:"cpu"`
	Memory struct {
		Total uint64 `json:"total"` // bytes
	} `json:"memory"`
}

// Ping asks for the daemon's server record (GET /1.0) and its instance
// names (GET /1.0/instances, read from its database): nil when it answers
// both. A daemon can answer the first while every request that needs its
// database waits.
func (c *Client) Ping(ctx context.Context) error {
	var v struct{}
	if err := c.get(ctx, "/1.0", &v); err != nil {
		return err
	}
	var names []string
	return c.get(ctx, "/1.0/instances", &names)
}

// Resources returns the host's CPUs and memory.
func (c *Client) Resources(ctx context.Context) (Resources, error) {
	var r Resources
	return r, c.get(ctx, "/1.0/resources", &r)
}

// Instance is an LXD instance (GET /1.0/instances/NAME).
type Instance struct {
	Name         string                       `json:"name"`
	Type         string                       `json:"type,omitempty"`
	Status       string                       `json:"status,omitempty"`
	Architecture string                       `json:"architecture,omitempty"`
	CreatedAt    time.Time                    `json:"created_at"`
	Config       map[string]string            `json:"config"`
	Devices      map[string]map[string]string `json:"devices"`
	Profiles     []string                     `json:"profiles"`
	Description  string                       `json:"description"`
}

// InstancesPost is the body of POST /1.0/instances.
type InstancesPost struct {
	Name     string                       `json:"name"`
	Type     string                       `json:"type"`
	Source   InstanceSource               `json:"source"`
	Config   map[string]string            `json:"config,omitempty"`
	Devices  map[string]map[string]string `json:"devices,omitempty"`
	Profiles []string                     `json:"profiles"`
}

// InstanceSource says what an instance is made from.
type InstanceSource struct {
	Type        string `json:"type"` // "image"
	Alias       string `json:"alias,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

// InstanceState is GET /1.0/instances/NAME/state.
type InstanceState struct {
	Status  string `json:"status"`
	Network map[string]struct {
		Addresses []struct {
			Family  string `json:"family"`
			Address string `json:"address"`
			Scope   string `json:"scope"`
		} `json:"addresses"`
	} `json:"network"`
}

// CreateInstance creates an instance and waits until it exists.
func (c *Client) CreateInstance(ctx context.Context, in InstancesPost) error {
	_, err := c.call(ctx, http.MethodPost, "/1.0/instances", in)
	return err
}

// Instance returns one instance.
func (c *Client) Instance(ctx context.Context, name string) (Instance, error) {
	var in Instance
	return in, c.get(ctx, "/1.0/instances/"+url.PathEscape(name), &in)
}

// Instances returns every instance of the default project, in full.
func (c *Client) Instances(ctx context.Context) ([]Instance, error) {
	var ins []Instance
	return ins, c.get(ctx, "/1.0/instances?recursion=1", &ins)
}

// InstanceState returns an instance's state (status, addresses).
func (c *Client) InstanceState(ctx context.Context, name string) (InstanceState, error) {
	var st InstanceState
	return st, c.get(ctx, "/1.0/instances/"+url.PathEscape(name)+"/state", &st)
}

// SetState starts ("start") or stops ("stop", force) an instance and waits.
func (c *Client) SetState(ctx context.Context, name, action string, force bool) error {
	body := map[string]any{"action": action, "timeout": 30, "force": force}
	_, err := c.call(ctx, http.MethodPut, "/1.0/instances/"+url.PathEscape(name)+"/state", body)
	return err
}

// DeleteInstance deletes a stopped instance and waits.
func (c *Client) DeleteInstance(ctx context.Context, name string) error {
	_, err := c.call(ctx, http.MethodDelete, "/1.0/instances/"+url.PathEscape(name), nil)
	return err
}

// Network is a network (GET /1.0/networks/NAME).
type Network struct {
	Name        string            `json:"name"`
	Type        string            `json:"type,omitempty"`
	Managed     bool              `json:"managed"`
	Description string            `json:"description"`
	Config      map[string]string `json:"config"`
	Status      string            `json:"status,omitempty"`
}

// Networks returns every network, in full.
func (c *Client) Networks(ctx context.Context) ([]Network, error) {
	var ns []Network
	return ns, c.get(ctx, "/1.0/networks?recursion=1", &ns)
}

// Network returns one network.
func (c *Client) Network(ctx context.Context, name string) (Network, error) {
	var n Network
	return n, c.get(ctx, "/1.0/networks/"+url.PathEscape(name), &n)
}

// CreateNetwork creates a managed network (n.Type e.g. "bridge").
func (c *Client) CreateNetwork(ctx context.Context, n Network) error {
	_, err := c.call(ctx, http.MethodPost, "/1.0/networks", n)
	return err
}

// DeleteNetwork deletes a network.
func (c *Client) DeleteNetwork(ctx context.Context, name string) error {
	_, err := c.call(ctx, http.MethodDelete, "/1.0/networks/"+url.PathEscape(name), nil)
	return err
}

// StorageVolume is a custom storage volume of a pool.
type StorageVolume struct {
	Name        string            `json:"name"`
	Type        string            `json:"type"` // "custom"
	ContentType string            `json:"content_type,omitempty"`
	Description string            `json:"description"`
	Config      map[string]string `json:"config"`
}

func volumesPath(pool string) string {
	return "/1.0/storage-pools/" + url.PathEscape(pool) + "/volumes/custom"
}

// StorageVolumes returns the custom volumes of a pool, in full.
func (c *Client) StorageVolumes(ctx context.Context, pool string) ([]StorageVolume, error) {
	var vs []StorageVolume
	return vs, c.get(ctx, volumesPath(pool)+"?recursion=1", &vs)
}

// CreateStorageVolume creates a custom volume in pool.
func (c *Client) CreateStorageVolume(ctx context.Context, pool string, v StorageVolume) error {
	v.Type = "custom"
	_, err := c.call(ctx, http.MethodPost, volumesPath(pool), v)
	return err
}

// DeleteStorageVolume deletes a custom volume of pool.
func (c *Client) DeleteStorageVolume(ctx context.Context, pool, name string) error {
	_, err := c.call(ctx, http.MethodDelete, volumesPath(pool)+"/"+url.PathEscape(name), nil)
	return err
}

// ImageAlias is an image alias.
type ImageAlias struct {
	Name        string `json:"name"`
	Target      string `json:"target"` // image fingerprint
	Description string `json:"description,omitempty"`
}

// ImageAlias returns an alias; an *APIError with Status 404 when missing.
func (c *Client) ImageAlias(ctx context.Context, name string) (ImageAlias, error) {
	var a ImageAlias
	return a, c.get(ctx, "/1.0/images/aliases/"+url.PathEscape(name), &a)
}

// ImportImage uploads a unified image tarball (metadata.yaml, templates/
// and rootfs/ in one tar) and returns the image's fingerprint.
func (c *Client) ImportImage(ctx context.Context, tarball io.Reader) (string, error) {
	op, err := c.call(ctx, http.MethodPost, "/1.0/images", tarball)
	if err != nil {
		return "", err
	}
	if op == nil {
		return "", fmt.Errorf("lxd: POST /1.0/images: no operation in the answer")
	}
	fp, _ := op.Metadata["fingerprint"].(string)
	if fp == "" {
		return "", fmt.Errorf("lxd: POST /1.0/images: no fingerprint in the operation")
	}
	return fp, nil
}

// CreateImageAlias points a new alias at an image.
func (c *Client) CreateImageAlias(ctx context.Context, a ImageAlias) error {
	_, err := c.call(ctx, http.MethodPost, "/1.0/images/aliases", a)
	return err
}

// DeleteImageAlias deletes an alias (the image stays).
func (c *Client) DeleteImageAlias(ctx context.Context, name string) error {
	_, err := c.call(ctx, http.MethodDelete, "/1.0/images/aliases/"+url.PathEscape(name), nil)
	return err
}

// bytesOf formats a size in MiB as LXD reads it ("512MiB").
func bytesOf(mib uint64) string { return strconv.FormatUint(mib, 10) + "MiB" }
