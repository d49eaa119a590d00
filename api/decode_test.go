package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/musterhq/muster"
)

func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantMsg    string
		wantLogged bool
	}{
		{"no code", errors.New("disk on fire at /secret/path"), 500, muster.EInternal, "internal error", true},
		{"wrapped code", &muster.Error{Code: muster.EConflict, Message: "taken", Err: errors.New("x")}, 409, muster.EConflict, "taken", false},
		{"not provisioned", muster.Errorf(muster.ENotProvisioned, "nope"), 401, muster.ENotProvisioned, "nope", false},
		{"unavailable", muster.Errorf(muster.EUnavailable, "later"), 503, muster.EUnavailable, "later", false},
		{"too large", errTooLarge, 413, muster.EInvalid, errTooLarge.Message, false},
		{"unknown code", muster.Errorf("weird", "odd"), 500, "weird", "odd", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			w := httptest.NewRecorder()
			writeError(w, logger, httptest.NewRequest("GET", "/v1/x", nil), tc.err)
			if w.Code != tc.wantStatus {
				t.Errorf("got status %d, want %d", w.Code, tc.wantStatus)
			}
			var eb errorBody
			if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil {
				t.Fatal(err)
			}
			if eb.Error.Code != tc.wantCode || eb.Error.Message != tc.wantMsg {
				t.Errorf("got %+v, want %s %q", eb.Error, tc.wantCode, tc.wantMsg)
			}
			if got := strings.Count(logs.String(), "request failed"); got != map[bool]int{true: 1, false: 0}[tc.wantLogged] {
				t.Errorf("got %d log lines, want logged=%v: %s", got, tc.wantLogged, logs.String())
			}
			back := decodeErrorBody(w.Code, w.Body.Bytes())
			if back.Code != tc.wantCode {
				t.Errorf("client decode: got code %q, want %q", back.Code, tc.wantCode)
			}
		})
	}
	if got := decodeErrorBody(502, []byte("<html>bad gateway</html>")); got.Code != muster.EInternal {
		t.Errorf("non-JSON 502: got code %q, want internal", got.Code)
	}
	if got := decodeErrorBody(404, nil); got.Code != muster.ENotFound {
		t.Errorf("empty 404: got code %q, want not-found", got.Code)
	}
}

// FuzzDecodeRequest feeds arbitrary bodies through the request decoding
// path and the validation behind it: it never panics, and every error has
// code invalid.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"count":2,"constraints":"cores=2 mem=4G","group":"web","storage":["data=10G,pool=ssd"]}`,
		`{"groups":[{"name":"web","count":3,"constraints":"arch=arm64"}],"dry-run":true}`,
		`{"ids":["0","1"],"force":true}`,
		`{"model":"default","machine":"0","password":"p","nonce":"n"}`,
		`{"model":"default","machine":"0","token":"t","document":"{}","signature":"AA=="}`,
		`{"set":{"retry-count":"3"}}`,
		`{"count":1}{"count":2}`,
		`{"count":1e400}`,
		`[`, ``, `null`, `{"storage":[null]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(what string, err error) {
			if err != nil && muster.ErrorCode(err) != muster.EInvalid {
				t.Fatalf("%s: got error %v with code %q, want invalid", what, err, muster.ErrorCode(err))
			}
		}
		var add AddMachinesRequest
		if err := decodeJSON(bytes.NewReader(body), 4096, &add); err != nil {
			check("decode add-machines", err)
		} else {
			_, err := addMachinesTemplates(add)
			check("add-machines templates", err)
		}
		var apply ApplyRequest
		if err := decodeJSON(bytes.NewReader(body), 4096, &apply); err != nil {
			check("decode apply", err)
		} else {
			_, _, err := planApply(apply, nil)
			check("apply plan", err)
		}
		var rm RemoveMachinesRequest
		if err := decodeJSON(bytes.NewReader(body), 4096, &rm); err != nil {
			check("decode remove", err)
		} else {
			_, err := uniqueIDs(rm.IDs)
			check("remove ids", err)
		}
		var model AddModelRequest
		if err := decodeJSON(bytes.NewReader(body), 4096, &model); err != nil {
			check("decode add-model", err)
		} else {
			_, err := newModel(model)
			check("add-model", err)
		}
		var login LoginRequest
		check("decode login", decodeJSON(bytes.NewReader(body), 4096, &login))
		var cfg ModelConfigRequest
		check("decode config", decodeJSON(bytes.NewReader(body), 4096, &cfg))
		var upd AgentUpdate
		check("decode agent update", decodeJSON(bytes.NewReader(body), 4096, &upd))
		var enrol EnrolRequest
		check("decode enrol", decodeJSON(bytes.NewReader(body), 4096, &enrol))
	})
}

func TestDecodeJSONLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		limit   int64
		wantErr error
	}{
		{"fits", `{"count":1}`, 11, nil},
		{"one over", `{"count":1} `, 11, errTooLarge},
		{"far over", `{"constraints":"` + strings.Repeat("x", 100) + `"}`, 20, errTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v AddMachinesRequest
			err := decodeJSON(strings.NewReader(tc.body), tc.limit, &v)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("got %v, want %v", err, tc.wantErr)
			}
		})
	}
}
