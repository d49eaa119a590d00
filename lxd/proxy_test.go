package lxd

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
)

// daemonProxy is a reverse proxy in front of the real daemon's socket that
// can inject what a test cannot make a real daemon do on demand: hold
// every request until its client gives up (slow), or answer the next
// instance creation with a storage-full error.
type daemonProxy struct {
	socket string

	mu       sync.Mutex
	slow     bool
	failNext string // error text for the next POST /1.0/instances
}

func newDaemonProxy(tb testing.TB, upstream string) *daemonProxy {
	tb.Helper()
	d := &daemonProxy{socket: filepath.Join(tb.TempDir(), "proxy.socket")}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: "lxd"})
	rp.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", upstream)
	}}
	ln, err := net.Listen("unix", d.socket)
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		slow, fail := d.slow, ""
		if r.Method == http.MethodPost && r.URL.Path == "/1.0/instances" {
			fail, d.failNext = d.failNext, ""
		}
		d.mu.Unlock()
		switch {
		case slow:
			<-r.Context().Done()
		case fail != "":
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"type":"error","error":%q,"error_code":500}`, fail)
		default:
			rp.ServeHTTP(w, r)
		}
	})}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return d
}

func (d *daemonProxy) setSlow() {
	d.mu.Lock()
	d.slow = true
	d.mu.Unlock()
}

func (d *daemonProxy) failNextCreate(msg string) {
	d.mu.Lock()
	d.failNext = msg
	d.mu.Unlock()
}
