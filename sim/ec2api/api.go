// Package ec2api serves a subset of the EC2 Query API (awsEc2query
// protocol, version 2016-11-15) on a sim.Cloud, so that the AWS SDKs, the
// AWS CLI and muster's ec2 provider run against the sim. It is the same
// cloud as the sim's own API: its calls count, wait, fail and are limited
// under the sim's call kinds, and its instances are the ones a sim
// Provider sees.
//
// A request goes: body (at most 1 MiB) → SigV4 signature → form → action
// → Cloud.Do (latency, rate limits, injected errors, counted under the
// action's call kind; then reply delay, lost replies) → XML reply or
// error document. Failures map to EC2's codes: throttled →
// RequestLimitExceeded (503), capacity → InsufficientInstanceCapacity
// (500), an injected call fault → InternalError (500), a zone fault →
// Unavailable (503), bad input → InvalidParameterValue and the other
// Invalid* codes (400). Terminated instances (of either API) are listed
// as terminated for sim.TombstoneTTL, and a RunInstances client token
// returns its reservation for the cloud's lifetime.
//
// The actions and their call kinds: DescribeAvailabilityZones (zones),
// DescribeSubnets (subnets), RunInstances (start, instances = MaxCount),
// DescribeInstances (list), TerminateInstances (stop); StopInstances,
// StartInstances, CreateTags and DeleteTags (modify); DescribeImages,
// DescribeInstanceTypes, DescribeInstanceAttribute, DescribeTags,
// DescribeInstanceStatus, DescribeVpcs, DescribeRegions and
// DescribeVolumes (describe). Instances it launches are "pending" for
// sim.Config.PendingTime, then "running".
package ec2api

import (
	"context"
	"crypto/rand"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

// Config configures the API.
type Config struct {
	// AccessKey and SecretKey are the key pair requests must be
	// SigV4-signed with. Defaults sim.DefaultEC2AccessKey and
	// sim.DefaultEC2SecretKey.
	AccessKey, SecretKey string
	// Clock is what request signatures' dates are checked against.
	// Default muster.SystemClock.
	Clock muster.Clock
}

// ownerID is the account that owns the sim's reservations.
const ownerID = "111122223333"

// maxBody is the largest request body the API reads.
const maxBody = 1 << 20

// API is the EC2 Query API of a cloud, an http.Handler of POST requests.
type API struct {
	c           *sim.Cloud
	key, secret string
	clock       muster.Clock
}

// New returns the EC2 API of c.
func New(c *sim.Cloud, cfg Config) *API {
	a := &API{c: c, key: cfg.AccessKey, secret: cfg.SecretKey, clock: cfg.Clock}
	if a.clock == nil {
		a.clock = muster.SystemClock
	}
	if a.key == "" {
		a.key = sim.DefaultEC2AccessKey
	}
	if a.secret == "" {
		a.secret = sim.DefaultEC2SecretKey
	}
	return a
}

// Credentials returns the key pair the API accepts.
func (a *API) Credentials() (accessKey, secretKey string) { return a.key, a.secret }

// apiError is an EC2 error document with its HTTP status.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalidValue(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "InvalidParameterValue", format, args...)
}

func missingParam(name string) *apiError {
	return newError(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter %s", name)
}

// toAPIError converts a cloud error into EC2's code and status.
func toAPIError(err error) *apiError {
	var ee *apiError
	if errors.As(err, &ee) {
		return ee
	}
	var pe *muster.ProviderError
	if errors.As(err, &pe) {
		switch {
		case pe.Kind == muster.ErrThrottled:
			return newError(http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded. (%s)", pe.Message)
		case pe.Kind == muster.ErrCapacity && errors.Is(err, sim.ErrNoAddress):
			return newError(http.StatusBadRequest, "InsufficientFreeAddressesInSubnet", "%s", pe.Message)
		case pe.Kind == muster.ErrCapacity:
			return newError(http.StatusInternalServerError, "InsufficientInstanceCapacity", "%s", pe.Message)
		case pe.Kind == muster.ErrUnavailable && pe.Zone != "":
			return newError(http.StatusServiceUnavailable, "Unavailable", "%s", pe.Message)
		case pe.Kind == muster.ErrQuota:
			return newError(http.StatusBadRequest, "VcpuLimitExceeded", "%s", pe.Message)
		case pe.Kind == muster.ErrZoneIndependent:
			return invalidValue("%s", pe.Message)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return newError(http.StatusServiceUnavailable, "RequestCanceled", "%v", err)
	}
	return newError(http.StatusInternalServerError, "InternalError", "An internal error has occurred (%v)", err)
}

// query is one parsed request.
type query struct {
	ctx       context.Context
	form      url.Values
	region    string
	requestID string
}

// action is an action of the API: its call kind, the instances it takes
// from the instance bucket, and what it does (inside Cloud.Do). run
// returns the response document.
type action struct {
	kind      string
	instances func(a *API, q *query) int
	run       func(a *API, q *query) (any, error)
}

var actions = map[string]action{
	"DescribeAvailabilityZones": {kind: sim.CallZones, run: (*API).describeAvailabilityZones},
	"DescribeSubnets":           {kind: sim.CallSubnets, run: (*API).describeSubnets},
	"DescribeImages":            {kind: sim.CallDescribe, run: (*API).describeImages},
	"DescribeInstanceTypes":     {kind: sim.CallDescribe, run: (*API).describeInstanceTypes},
	"RunInstances":              {kind: sim.CallStart, instances: (*API).runCount, run: (*API).runInstances},
	"DescribeInstances":         {kind: sim.CallList, run: (*API).describeInstances},
	"TerminateInstances":        {kind: sim.CallStop, run: (*API).terminateInstances},
	"DescribeInstanceAttribute": {kind: sim.CallDescribe, run: (*API).describeInstanceAttribute},
	"StopInstances":             {kind: sim.CallModify, run: (*API).stopInstances},
	"StartInstances":            {kind: sim.CallModify, run: (*API).startInstances},
	"CreateTags":                {kind: sim.CallModify, run: (*API).createTags},
	"DeleteTags":                {kind: sim.CallModify, run: (*API).deleteTags},
	"DescribeTags":              {kind: sim.CallDescribe, run: (*API).describeTags},
	"DescribeInstanceStatus":    {kind: sim.CallDescribe, run: (*API).describeInstanceStatus},
	"DescribeVpcs":              {kind: sim.CallDescribe, run: (*API).describeVpcs},
	"DescribeRegions":           {kind: sim.CallDescribe, run: (*API).describeRegions},
	"DescribeVolumes":           {kind: sim.CallDescribe, run: (*API).describeVolumes},
}

// ServeHTTP answers one request.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := newRequestID()
	if r.Method != http.MethodPost {
		writeError(w, reqID, newError(http.StatusMethodNotAllowed, "InvalidHttpRequest", "The EC2 Query API takes POST requests"))
		return
	}
	out, err := a.serve(r, reqID)
	if errors.Is(err, sim.ErrReplyLost) {
		dropConnection(w)
		return
	}
	if err != nil {
		writeError(w, reqID, toAPIError(err))
		return
	}
	b, merr := xml.Marshal(out)
	if merr != nil {
		writeError(w, reqID, toAPIError(merr))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, xml.Header)
	w.Write(b)
}

// dropConnection closes the client's connection without a response.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2, or a writer that cannot be hijacked: abort the
		// response, which net/http does without logging.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// serve reads, authenticates and runs one request.
func (a *API) serve(r *http.Request, reqID string) (any, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, invalidValue("cannot read the request body: %v", err)
	}
	if len(body) > maxBody {
		return nil, invalidValue("The request body exceeds %d bytes", maxBody)
	}
	region, aerr := a.verifySigV4(r, body)
	if aerr != nil {
		return nil, aerr
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, invalidValue("The request body is not a valid form: %v", err)
	}
	name := form.Get("Action")
	if name == "" {
		return nil, missingParam("Action")
	}
	if form.Get("Version") == "" {
		return nil, missingParam("Version")
	}
	act, ok := actions[name]
	if !ok {
		return nil, newError(http.StatusBadRequest, "InvalidAction", "The action %s is not valid for this web service.", truncate(name, 64))
	}
	if form.Get("DryRun") == "true" {
		return nil, newError(http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
	}
	q := &query{ctx: r.Context(), form: form, region: region, requestID: reqID}
	n := 0
	if act.instances != nil {
		n = act.instances(a, q)
	}
	var out any
	err = a.c.Do(q.ctx, act.kind, n, func() error {
		var err error
		out, err = act.run(a, q)
		return err
	})
	return out, err
}

func writeError(w http.ResponseWriter, reqID string, e *apiError) {
	b, _ := xml.Marshal(errorResponse{Code: e.Code, Message: e.Message, RequestID: reqID})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.Status)
	io.WriteString(w, xml.Header)
	w.Write(b)
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Form decoding: EC2's Query API numbers list members from 1, as
// Name.N, and nests structures as Name.N.Member.

// maxMembers bounds the members of one list parameter.
const maxMembers = 1000

// indexes returns, in order, the member numbers N for which the form has
// prefix.N or prefix.N.something.
func indexes(form url.Values, prefix string) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for k := range form {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || strconv.Itoa(n) != num {
			return nil, invalidValue("The parameter %s is not a valid list member", truncate(k, 64))
		}
		if !seen[n] {
			if len(out) == maxMembers {
				return nil, invalidValue("Too many members in %s (at most %d)", prefix, maxMembers)
			}
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

// list returns the values of prefix.1, prefix.2, ... in member order.
func list(form url.Values, prefix string) ([]string, error) {
	ns, err := indexes(form, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		key := prefix + "." + strconv.Itoa(n)
		if _, ok := form[key]; !ok {
			return nil, invalidValue("The parameter %s.%d has members but no value", prefix, n)
		}
		out = append(out, form.Get(key))
	}
	return out, nil
}

// filter is one Filter.N: a name and the values any of which matches.
type filter struct {
	name   string
	values []string
}

func filters(form url.Values) ([]filter, error) {
	ns, err := indexes(form, "Filter")
	if err != nil {
		return nil, err
	}
	var out []filter
	for _, n := range ns {
		p := "Filter." + strconv.Itoa(n)
		name := form.Get(p + ".Name")
		if name == "" {
			return nil, missingParam(p + ".Name")
		}
		vals, err := list(form, p+".Value")
		if err != nil {
			return nil, err
		}
		if len(vals) == 0 {
			return nil, invalidValue("The filter '%s' has no values", truncate(name, 64))
		}
		out = append(out, filter{name, vals})
	}
	return out, nil
}

func anyMatch(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if wildcardMatch(p, v) {
				return true
			}
		}
	}
	return false
}

// wildcardMatch matches s against pattern, where * is any run of
// characters and ? any one character.
func wildcardMatch(pattern, s string) bool {
	p, t := []rune(pattern), []rune(s)
	pi, ti, star, mark := 0, 0, -1, 0
	for ti < len(t) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == t[ti]):
			pi++
			ti++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ti
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			ti = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// intParam returns the integer parameter name, def when absent.
func intParam(form url.Values, name string, def int) (int, error) {
	s := form.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, invalidValue("Invalid value '%s' for %s", truncate(s, 32), name)
	}
	return n, nil
}

// boolParam parses an EC2 boolean.
func boolParam(form url.Values, name string, def bool) (bool, error) {
	switch s := form.Get(name); s {
	case "":
		return def, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, invalidValue("Invalid value '%s' for %s: expecting true or false", truncate(s, 32), name)
	}
}
