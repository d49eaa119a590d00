package ec2api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Verification of AWS Signature Version 4 (header form, as the AWS SDKs
// sign): the sim rebuilds the canonical request from what it received and
// the headers the client says it signed, derives the signing key from its
// own secret and compares signatures. A request dated more than maxSkew
// away from the API's clock (Config.Clock, not the cloud's, which may be
// a test's fake one) is refused with RequestExpired, as AWS does.

const sigV4Algorithm = "AWS4-HMAC-SHA256"

// maxSkew is how far a request's X-Amz-Date may be from the API's clock
// (AWS's common RequestExpired error: 15 minutes either way).
const maxSkew = 15 * time.Minute

// sigV4Auth is a parsed Authorization header.
type sigV4Auth struct {
	accessKey, date, region, service string
	signedHeaders                    []string
	signature                        string
}

// parseSigV4Auth parses `AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=a;b, Signature=HEX`.
func parseSigV4Auth(h string) (sigV4Auth, bool) {
	var a sigV4Auth
	alg, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || alg != sigV4Algorithm {
		return a, false
	}
	var cred, signed string
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return a, false
		}
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			a.signature = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || signed == "" || a.signature == "" {
		return a, false
	}
	a.accessKey, a.date, a.region, a.service = scope[0], scope[1], scope[2], scope[3]
	a.signedHeaders = strings.Split(signed, ";")
	return a, true
}

// verifySigV4 checks r's signature over body with the cloud's EC2 key
// pair and returns the region of its credential scope.
func (api *API) verifySigV4(r *http.Request, body []byte) (string, *apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", newError(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials: the request is not signed")
	}
	a, ok := parseSigV4Auth(h)
	if !ok {
		return "", newError(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials: malformed Authorization header")
	}
	if a.accessKey != api.key {
		return "", newError(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials")
	}
	amzDate := r.Header.Get("X-Amz-Date")
	signed, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return "", newError(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials: missing or bad X-Amz-Date")
	}
	if now := api.clock.Now(); signed.Before(now.Add(-maxSkew)) || signed.After(now.Add(maxSkew)) {
		return "", newError(http.StatusBadRequest, "RequestExpired", "Request has expired: it is dated %s, more than %s from the server's time %s", amzDate, maxSkew, now.UTC().Format("20060102T150405Z"))
	}
	mismatch := func(why string) *apiError {
		return newError(http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided: %s", why)
	}
	if a.service != "ec2" {
		return "", mismatch("credential should be scoped to correct service: 'ec2'")
	}
	if a.date != amzDate[:8] {
		return "", mismatch("credential scope date does not match X-Amz-Date")
	}
	if !slices.Contains(a.signedHeaders, "host") || !slices.Contains(a.signedHeaders, "x-amz-date") {
		return "", mismatch("host and x-amz-date must be signed")
	}
	sum := sha256.Sum256(body)
	canonical := strings.Join([]string{
		r.Method,
		sigV4EscapePath(r.URL.EscapedPath()),
		sigV4Query(r.URL.RawQuery),
		sigV4Headers(r, a.signedHeaders),
		strings.Join(a.signedHeaders, ";"),
		hex.EncodeToString(sum[:]),
	}, "\n")
	creq := sha256.Sum256([]byte(canonical))
	scope := a.date + "/" + a.region + "/" + a.service + "/aws4_request"
	toSign := sigV4Algorithm + "\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(creq[:])
	key := hmacSHA256([]byte("AWS4"+api.secret), a.date)
	key = hmacSHA256(key, a.region)
	key = hmacSHA256(key, a.service)
	key = hmacSHA256(key, "aws4_request")
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(a.signature)) {
		return "", mismatch("check your AWS Secret Access Key and signing method")
	}
	return a.region, nil
}

// collapseSpaces replaces each run of spaces in s by one.
func collapseSpaces(s string) string {
	for strings.Contains(s, "  ") {
		s = strings.ReplaceAll(s, "  ", " ")
	}
	return s
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// sigV4Headers returns the canonical headers block: each signed header,
// lower case, with its values trimmed, inner runs of spaces collapsed and
// joined by commas, one per line.
func sigV4Headers(r *http.Request, names []string) string {
	var b strings.Builder
	for _, n := range names {
		var vals []string
		switch n {
		case "host":
			vals = []string{r.Host}
		case "content-length":
			vals = r.Header.Values("Content-Length")
			if len(vals) == 0 && r.ContentLength >= 0 {
				vals = []string{strconv.FormatInt(r.ContentLength, 10)}
			}
		default:
			vals = r.Header.Values(n)
		}
		b.WriteString(n)
		b.WriteByte(':')
		for i, v := range vals {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(collapseSpaces(strings.TrimSpace(v)))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// sigV4Query returns the canonical query string: each name and value
// encoded, then sorted.
func sigV4Query(raw string) string {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return raw // cannot match what the client signed; the signature fails
	}
	var pairs [][2]string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, [2]string{sigV4Escape(k, false), sigV4Escape(v, false)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p[0] + "=" + p[1])
	}
	return b.String()
}

// sigV4EscapePath encodes an escaped path once more, as SigV4 does for
// every service but S3.
func sigV4EscapePath(p string) string {
	if p == "" {
		return "/"
	}
	return sigV4Escape(p, true)
}

// sigV4Escape percent-encodes every byte but the unreserved ones (and '/'
// when keepSlash).
func sigV4Escape(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if 'A' <= ch && ch <= 'Z' || 'a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' ||
			ch == '-' || ch == '_' || ch == '.' || ch == '~' || keepSlash && ch == '/' {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[ch>>4])
		b.WriteByte(hexDigits[ch&15])
	}
	return b.String()
}
