package sim

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
)

// The EC2 API: NewServer serves a subset of the EC2 Query API (awsEc2query
// protocol, version 2016-11-15) at POST / and /ec2/, on the same cloud as the
// sim's own API, so that both see the same instances, faults, rate limits,
// capacity, counters and state. Requests must be SigV4-signed with the
// cloud's EC2 key pair (Config.EC2AccessKey/EC2SecretKey). A request goes:
// body (at most 1 MiB) → signature → form → action → enter (latency, rate
// limits, injected errors; counted under the action's call kind) → work →
// leave (reply delay, lost replies) → XML reply or error document.
//
// The actions and their call kinds: DescribeAvailabilityZones (zones),
// DescribeSubnets (subnets), DescribeImages, DescribeInstanceTypes and
// DescribeInstanceAttribute (describe), RunInstances (start, instances =
// MaxCount), DescribeInstances (list), TerminateInstances (stop).

// The sim's default EC2 key pair.
const (
	DefaultEC2AccessKey = "AKIAMUSTERSIMULATOR0"
	DefaultEC2SecretKey = "muster-sim-secret-access-key"
)

// ec2OwnerID is the account that owns the sim's reservations.
const ec2OwnerID = "111122223333"

// ec2MaxBody is the largest request body the EC2 API reads.
const ec2MaxBody = 1 << 20

// EC2Credentials returns the key pair the cloud's EC2 API accepts.
func (c *Cloud) EC2Credentials() (accessKey, secretKey string) { return c.ec2Key, c.ec2Secret }

// ec2Error is an EC2 error document with its HTTP status.
type ec2Error struct {
	Status  int
	Code    string
	Message string
}

func (e *ec2Error) Error() string { return e.Code + ": " + e.Message }

func newEC2Error(status int, code, format string, args ...any) *ec2Error {
	return &ec2Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalidValue(format string, args ...any) *ec2Error {
	return newEC2Error(http.StatusBadRequest, "InvalidParameterValue", format, args...)
}

func missingParam(name string) *ec2Error {
	return newEC2Error(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter %s", name)
}

// toEC2Error converts a cloud error into EC2's code and status.
func toEC2Error(err error) *ec2Error {
	var ee *ec2Error
	if errors.As(err, &ee) {
		return ee
	}
	var pe *muster.ProviderError
	if errors.As(err, &pe) {
		switch {
		case pe.Kind == muster.ErrThrottled:
			return newEC2Error(http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded. (%s)", pe.Message)
		case pe.Kind == muster.ErrCapacity && errors.Is(err, errNoAddress):
			return newEC2Error(http.StatusBadRequest, "InsufficientFreeAddressesInSubnet", "%s", pe.Message)
		case pe.Kind == muster.ErrCapacity:
			return newEC2Error(http.StatusInternalServerError, "InsufficientInstanceCapacity", "%s", pe.Message)
		case pe.Kind == muster.ErrUnavailable && pe.Zone != "":
			return newEC2Error(http.StatusServiceUnavailable, "Unavailable", "%s", pe.Message)
		case pe.Kind == muster.ErrZoneIndependent:
			return invalidValue("%s", pe.Message)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return newEC2Error(http.StatusServiceUnavailable, "RequestCanceled", "%v", err)
	}
	return newEC2Error(http.StatusInternalServerError, "InternalError", "An internal error has occurred (%v)", err)
}

// ec2Query is one parsed request.
type ec2Query struct {
	ctx       context.Context
	form      url.Values
	region    string
	requestID string
}

// ec2Action is an action of the EC2 API: its call kind, the instances it
// takes from the instance bucket, and what it does (after enter, before
// leave). run returns the response document.
type ec2Action struct {
	kind      string
	instances func(c *Cloud, q *ec2Query) int
	run       func(c *Cloud, q *ec2Query) (any, error)
}

var ec2Actions = map[string]ec2Action{
	"DescribeAvailabilityZones": {kind: CallZones, run: (*Cloud).ec2DescribeAvailabilityZones},
	"DescribeSubnets":           {kind: CallSubnets, run: (*Cloud).ec2DescribeSubnets},
	"DescribeImages":            {kind: CallDescribe, run: (*Cloud).ec2DescribeImages},
	"DescribeInstanceTypes":     {kind: CallDescribe, run: (*Cloud).ec2DescribeInstanceTypes},
	"RunInstances":              {kind: CallStart, instances: (*Cloud).ec2RunCount, run: (*Cloud).ec2RunInstances},
	"DescribeInstances":         {kind: CallList, run: (*Cloud).ec2DescribeInstances},
	"TerminateInstances":        {kind: CallStop, run: (*Cloud).ec2TerminateInstances},
	"DescribeInstanceAttribute": {kind: CallDescribe, run: (*Cloud).ec2DescribeInstanceAttribute},
}

// ec2 serves POST / and /ec2/.
func (s *server) ec2(w http.ResponseWriter, r *http.Request) {
	reqID := newRequestID()
	out, err := s.c.serveEC2(r, reqID)
	if errors.Is(err, errReplyLost) {
		dropConnection(w)
		return
	}
	if err != nil {
		writeEC2Error(w, reqID, toEC2Error(err))
		return
	}
	b, merr := xml.Marshal(out)
	if merr != nil {
		writeEC2Error(w, reqID, toEC2Error(merr))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, xml.Header)
	w.Write(b)
}

// serveEC2 reads, authenticates and runs one request.
func (c *Cloud) serveEC2(r *http.Request, reqID string) (any, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, ec2MaxBody+1))
	if err != nil {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidParameterValue", "cannot read the request body: %v", err)
	}
	if len(body) > ec2MaxBody {
		return nil, invalidValue("The request body exceeds %d bytes", ec2MaxBody)
	}
	region, aerr := c.verifySigV4(r, body)
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
	act, ok := ec2Actions[name]
	if !ok {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidAction", "The action %s is not valid for this web service.", truncate(name, 64))
	}
	if form.Get("DryRun") == "true" {
		return nil, newEC2Error(http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
	}
	q := &ec2Query{ctx: r.Context(), form: form, region: region, requestID: reqID}
	n := 0
	if act.instances != nil {
		n = act.instances(c, q)
	}
	if err := c.enter(q.ctx, act.kind, n); err != nil {
		return nil, err
	}
	out, err := act.run(c, q)
	if err != nil {
		c.mu.Lock()
		c.stats.Errors[act.kind]++
		c.mu.Unlock()
	}
	if lerr := c.leave(q.ctx, act.kind); lerr != nil {
		return nil, lerr
	}
	return out, err
}

func writeEC2Error(w http.ResponseWriter, reqID string, e *ec2Error) {
	b, _ := xml.Marshal(ec2ErrorResponse{Code: e.Code, Message: e.Message, RequestID: reqID})
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

// ec2Filter is one Filter.N: a name and the values any of which matches.
type ec2Filter struct {
	name   string
	values []string
}

func filters(form url.Values) ([]ec2Filter, error) {
	ns, err := indexes(form, "Filter")
	if err != nil {
		return nil, err
	}
	var out []ec2Filter
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
		out = append(out, ec2Filter{name, vals})
	}
	return out, nil
}

// matchFilters reports whether a resource passes every filter: fields are
// its values by filter name, tags serve the tag:KEY and tag-key filters
// (nil: the resource has none), and any other name is an
// InvalidParameterValue error. Filter values may hold the wildcards * and ?.
func matchFilters(fs []ec2Filter, tags map[string]string, fields map[string][]string) (bool, error) {
	for _, f := range fs {
		have, ok := fields[f.name]
		if !ok && tags != nil {
			have, ok = tagValues(tags, f.name)
		}
		if !ok {
			return false, invalidValue("The filter '%s' is invalid", truncate(f.name, 64))
		}
		if !anyMatch(f.values, have) {
			return false, nil
		}
	}
	return true, nil
}

// tagValues serves the tag:KEY and tag-key filters from tags.
func tagValues(tags map[string]string, name string) ([]string, bool) {
	if key, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, ok := tags[key]; ok {
			return []string{v}, true
		}
		return nil, true
	}
	if name == "tag-key" {
		keys := make([]string, 0, len(tags))
		for k := range tags {
			keys = append(keys, k)
		}
		return keys, true
	}
	return nil, false
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

// pageBounds returns the part [from, to) of a list of total items that
// MaxResults (minMax..maxMax; absent = all) and NextToken ask for, and the
// token of the rest ("" when none). Tokens of these lists are offsets.
func pageBounds(form url.Values, total, minMax, maxMax int) (from, to int, next string, err error) {
	max, err := intParam(form, "MaxResults", 0)
	if err != nil {
		return 0, 0, "", err
	}
	if form.Has("MaxResults") && (max < minMax || max > maxMax) {
		return 0, 0, "", invalidValue("Value ( %d ) for parameter maxResults is invalid. Expecting a value between %d and %d.", max, minMax, maxMax)
	}
	if tok := form.Get("NextToken"); tok != "" {
		n, ok := parseOffsetToken(tok)
		if !ok || n > total {
			return 0, 0, "", invalidValue("Invalid value '%s' for nextToken", truncate(tok, 64))
		}
		from = n
	}
	to = total
	if max > 0 && from+max < total {
		to = from + max
		next = offsetToken(to)
	}
	return from, to, next, nil
}

func offsetToken(n int) string { return "o" + strconv.Itoa(n) }

func parseOffsetToken(tok string) (int, bool) {
	s, ok := strings.CutPrefix(tok, "o")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == s
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
