package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/sqlstore"
)

// The body deadline covers bodies only (S5): neither a long answer to a
// bodiless request (an event stream) nor a handler still working after
// it read its body is cancelled by it. The deadline is the connection's,
// in wall time, so the handlers wait out a few deadlines of real time.
func TestBodyDeadlineCoversTheBodyOnly(t *testing.T) {
	st, err := sqlstore.Open(t.Context(), t.TempDir()+"/muster.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := NewServer(Config{Store: st, ControllerUUID: "c", AdminTokenHash: "h", BodyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusServiceUnavailable)
		case <-time.After(300 * time.Millisecond):
			io.WriteString(w, "done")
		}
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, method := range []string{"GET", "POST"} {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader("body")
		}
		req, _ := http.NewRequest(method, ts.URL+"/work", body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: got %d %q, want 200: the body deadline outlived the body", method, resp.StatusCode, b)
		}
	}
}
