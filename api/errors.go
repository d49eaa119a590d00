package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/musterhq/muster"
)

// codeStatus is the one table from error code to HTTP status (DESIGN §3).
var codeStatus = map[string]int{
	muster.EInvalid:        http.StatusBadRequest,
	muster.EUnauthorized:   http.StatusUnauthorized,
	muster.ENotProvisioned: http.StatusUnauthorized,
	muster.EForbidden:      http.StatusForbidden,
	muster.ENotFound:       http.StatusNotFound,
	muster.EConflict:       http.StatusConflict,
	muster.EUnavailable:    http.StatusServiceUnavailable,
	muster.EInternal:       http.StatusInternalServerError,
}

// StatusOf returns the HTTP status for an error code (500 for unknown ones).
func StatusOf(code string) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// codeOf guesses the code of an error response without a readable body.
func codeOf(status int) string {
	switch {
	case status == http.StatusRequestEntityTooLarge:
		return muster.EInvalid
	case status == http.StatusMethodNotAllowed:
		return muster.ENotFound
	}
	for code, s := range codeStatus {
		if s == status && code != muster.ENotProvisioned {
			return code
		}
	}
	if status >= 400 && status < 500 {
		return muster.EInvalid
	}
	return muster.EInternal
}

// MaxBodyBytes limits request bodies.
const MaxBodyBytes = 1 << 20

// errTooLarge marks a body over MaxBodyBytes: code invalid, status 413.
var errTooLarge = &muster.Error{Code: muster.EInvalid, Message: fmt.Sprintf("request body too large (limit %d bytes)", MaxBodyBytes)}

// writeError writes err as the API's error body. Errors without a code are
// logged here, once, and shown as a generic internal error.
func writeError(w http.ResponseWriter, logger *slog.Logger, r *http.Request, err error) {
	code := muster.ErrorCode(err)
	msg := muster.ErrorMessage(err)
	var me *muster.Error
	if !errors.As(err, &me) {
		logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error"
	} else if code == muster.EInternal {
		logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	status := StatusOf(code)
	if errors.Is(err, errTooLarge) {
		status = http.StatusRequestEntityTooLarge
	}
	if errors.As(err, new(errAuthBlocked)) {
		status = http.StatusTooManyRequests
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
	w.Write([]byte("\n"))
}

// limitedReader fails with errTooLarge once more than n bytes are read.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, errTooLarge
	}
	return n, err
}

// decodeJSON decodes exactly one JSON value from body into v: at most limit
// bytes, no unknown fields, nothing after the value. Every error has code
// EInvalid.
func decodeJSON(body io.Reader, limit int64, v any) error {
	dec := json.NewDecoder(&limitedReader{r: body, n: limit})
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badJSON(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
		return nil
	case err == nil:
		return muster.Errorf(muster.EInvalid, "bad request body: data after the JSON value")
	default:
		return badJSON(err)
	}
}

func badJSON(err error) error {
	if errors.Is(err, errTooLarge) {
		return errTooLarge
	}
	if errors.Is(err, io.EOF) {
		return muster.Errorf(muster.EInvalid, "bad request body: empty")
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		return muster.Errorf(muster.EInvalid, "bad request body: field %q: want %s", ute.Field, ute.Type)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return &muster.Error{Code: muster.EInvalid, Message: "bad request body: " + msg, Err: err}
}

// decode reads the request body into v (see decodeJSON).
func decode(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return muster.Errorf(muster.EInvalid, "bad content type %q: want application/json", ct)
	}
	return decodeJSON(r.Body, MaxBodyBytes, v)
}

// decodeErrorBody turns an error response into *muster.Error.
func decodeErrorBody(status int, body []byte) *muster.Error {
	var eb errorBody
	if err := json.Unmarshal(bytes.TrimSpace(body), &eb); err == nil && eb.Error.Code != "" {
		return &muster.Error{Code: eb.Error.Code, Message: eb.Error.Message}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return muster.Errorf(codeOf(status), "%s (HTTP %d)", msg, status)
}
