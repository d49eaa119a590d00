package connlimit

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testutil"
)

// server starts an HTTP server on loopback behind a limiter of max
// connections; /block holds its request until release is closed.
func server(t *testing.T, max int, release chan struct{}) (*Limiter, string) {
	t.Helper()
	l := New(max)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	srv.Listener = l.Listener(srv.Listener)
	srv.Config.ConnState = l.ConnState
	srv.Start()
	t.Cleanup(srv.Close)
	return l, srv.Listener.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one request on c and returns the body, or the error.
func get(c net.Conn, path string) (string, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// closedByPeer reports whether the server closed c.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || strings.Contains(fmtErr(err), "reset")
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestIdleConnectionsMakeRoom(t *testing.T) {
	l, addr := server(t, 3, nil)
	// Three clients connect and say nothing; a fourth has a request.
	var idle []net.Conn
	for i := 0; i < 3; i++ {
		idle = append(idle, dial(t, addr))
		testutil.Eventually(t, "connection accepted", func() bool { return l.Stats().Open == i+1 })
	}
	c := dial(t, addr)
	if body, err := get(c, "/"); err != nil || body != "ok" {
		t.Fatalf("request at the cap: got %q, %v, want ok", body, err)
	}
	if !closedByPeer(idle[0]) {
		t.Fatal("the longest-idle connection is still open, want it closed to make room")
	}
	if st := l.Stats(); st.Open > 3 || st.Evicted != 1 {
		t.Fatalf("stats: got %+v, want at most 3 open and 1 evicted", st)
	}
	// A keep-alive connection that has just served a request is newer
	// than the silent ones: they go first.
	c2 := dial(t, addr)
	if body, err := get(c2, "/"); err != nil || body != "ok" {
		t.Fatalf("second request at the cap: got %q, %v", body, err)
	}
	if !closedByPeer(idle[1]) {
		t.Fatal("the next longest-idle connection is still open")
	}
	if body, err := get(c, "/"); err != nil || body != "ok" {
		t.Fatalf("keep-alive request on the earlier connection: got %q, %v, want ok (it was idle for less long)", body, err)
	}
}

func TestBusyConnectionsAreNotEvicted(t *testing.T) {
	release := make(chan struct{})
	l, addr := server(t, 2, release)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // runs before the server's cleanup, which waits for handlers
	done := make(chan error, 2)
	for i := 0; i < 2; i++ {
		c := dial(t, addr)
		go func() { _, err := get(c, "/block"); done <- err }()
	}
	testutil.Eventually(t, "two requests in flight", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		n := 0
		for c := range l.conns {
			if c.busy {
				n++
			}
		}
		return n == 2
	})
	c := dial(t, addr)
	if !closedByPeer(c) {
		t.Fatal("a connection beyond a cap of busy ones was kept, want it closed")
	}
	if st := l.Stats(); st.Refused != 1 || st.Evicted != 0 {
		t.Fatalf("stats: got %+v, want 1 refused, 0 evicted", st)
	}
	free()
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatalf("busy request: %v", err)
		}
	}
}

func TestTLSConnectionsAreTracked(t *testing.T) {
	l := New(1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Listener = l.Listener(srv.Listener)
	srv.Config.ConnState = l.ConnState
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS12
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The keep-alive TLS connection is seen as idle through tls.Conn.
	testutil.Eventually(t, "TLS connection idle", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for c := range l.conns {
			return !c.busy && c.idle > 1
		}
		return false
	})
	raw := dial(t, srv.Listener.Addr().String())
	testutil.Eventually(t, "idle TLS connection evicted for a new one", func() bool { return l.Stats().Evicted == 1 })
	raw.Close()
}

func TestFromRlimit(t *testing.T) {
	if n := FromRlimit(256); n < 64 {
		t.Fatalf("got cap %d, want at least 64", n)
	}
}
