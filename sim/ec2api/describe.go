package ec2api

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// row is how one resource of a describe action is filtered and paged.
type row struct {
	// key orders the resources and marks where a page ends: keys grow
	// along the list, so a page token (the last key seen) stays valid
	// while resources come and go. Empty: the resource's position in a
	// list that does not change.
	key string
	// fields are the resource's values by filter name.
	fields map[string][]string
	// tags serve the tag:KEY, tag-key and tag-value filters of a taggable
	// resource (see paging.tagged); nil is no tags.
	tags map[string]string
}

// paging is what a describe action accepts beyond its filters.
type paging struct {
	// minMax and maxMax bound MaxResults; maxMax 0 means the action
	// does not page (MaxResults and NextToken are refused).
	minMax, maxMax int
	// tagged is whether the resources take tag filters.
	tagged bool
}

// describe returns the items of all (in key order) that pass the
// request's filters, the page of them MaxResults and NextToken ask for,
// and the token of the next page ("" when none). Filter values may hold
// the wildcards * and ?; a filter name the resources lack is an
// InvalidParameterValue error.
func describe[T any](q *query, all []T, pg paging, view func(T) row) ([]T, string, error) {
	fs, err := filters(q.form)
	if err != nil {
		return nil, "", err
	}
	max, after, err := pageParams(q, pg)
	if err != nil {
		return nil, "", err
	}
	var out []T
	next, last := "", ""
	for i, item := range all {
		r := view(item)
		if r.key == "" {
			r.key = fmt.Sprintf("%08d", i)
		}
		if after != "" && r.key <= after {
			continue
		}
		ok, err := r.match(fs, pg.tagged)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			continue
		}
		if max > 0 && len(out) == max {
			next = pageToken(last)
			break
		}
		out = append(out, item)
		last = r.key
	}
	return out, next, nil
}

// pageParams returns MaxResults (0: all) and the key after which the
// page starts ("": from the start).
func pageParams(q *query, pg paging) (int, string, error) {
	if pg.maxMax == 0 {
		for _, p := range []string{"MaxResults", "NextToken"} {
			if q.form.Has(p) {
				return 0, "", newError(http.StatusBadRequest, "UnknownParameter", "The parameter %s is not recognized", p)
			}
		}
		return 0, "", nil
	}
	max, err := intParam(q.form, "MaxResults", 0)
	if err != nil {
		return 0, "", err
	}
	if q.form.Has("MaxResults") && (max < pg.minMax || max > pg.maxMax) {
		return 0, "", invalidValue("Value ( %d ) for parameter maxResults is invalid. Expecting a value between %d and %d.", max, pg.minMax, pg.maxMax)
	}
	tok := q.form.Get("NextToken")
	if tok == "" {
		return max, "", nil
	}
	key, ok := parsePageToken(tok)
	if !ok {
		return 0, "", invalidValue("Invalid value '%s' for nextToken", truncate(tok, 64))
	}
	return max, key, nil
}

// pageToken is the token of the page after key: the key and a check sum,
// so that a token the API did not make is refused.
func pageToken(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(append([]byte(key), sum[:4]...))
}

func parsePageToken(tok string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 5 {
		return "", false
	}
	key := string(b[:len(b)-4])
	return key, pageToken(key) == tok
}

// match reports whether r passes every filter.
func (r row) match(fs []filter, tagged bool) (bool, error) {
	for _, f := range fs {
		have, ok := r.fields[f.name]
		if !ok && tagged {
			have, ok = tagValues(r.tags, f.name)
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

// tagValues serves the tag:KEY, tag-key and tag-value filters from tags.
func tagValues(tags map[string]string, name string) ([]string, bool) {
	if key, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, ok := tags[key]; ok {
			return []string{v}, true
		}
		return nil, true
	}
	var out []string
	switch name {
	case "tag-key":
		for k := range tags {
			out = append(out, k)
		}
	case "tag-value":
		for _, v := range tags {
			out = append(out, v)
		}
	default:
		return nil, false
	}
	return out, true
}
