package lxd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

func TestParseConfig(t *testing.T) {
	good, err := ParseConfig(map[string]string{"zones": "x,y", "socket": "/run/lxd.sock", "image": "my/img", "storage-pool": "fast"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(good.Zones) != "[x y]" || good.Socket != "/run/lxd.sock" || good.Image != "my/img" || good.StoragePool != "fast" {
		t.Errorf("got %+v", good)
	}
	def, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(def.Zones) != "[a b c]" || def.Socket != DefaultSocket || def.Image != DefaultImage || def.StoragePool != DefaultStoragePool {
		t.Errorf("defaults: got %+v", def)
	}
	for _, tt := range []struct {
		name string
		in   map[string]string
		want string
	}{
		{"unknown key", map[string]string{"region": "x"}, `unknown lxd provider config key "region"`},
		{"empty zone", map[string]string{"zones": "a,,b"}, "bad zone name"},
		{"duplicate zone", map[string]string{"zones": "a,a"}, `zone "a" given more than once`},
		{"zone with space", map[string]string{"zones": "a b"}, "bad zone name"},
		{"relative socket", map[string]string{"socket": "lxd.sock"}, "bad socket"},
		{"image with space", map[string]string{"image": "my img"}, "bad image"},
		{"bad pool", map[string]string{"storage-pool": "-x"}, "bad storage-pool"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(tt.in)
			if muster.ErrorCode(err) != muster.EInvalid || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an invalid error containing %q", err, tt.want)
			}
		})
	}
}

var instanceNameRE = regexp.MustCompile(`^mu-[a-z0-9-]{1,8}-m[a-z0-9-]{1,24}-[0-9a-f]{12}$`)

// ownName reports whether id has the shape of InstanceName's names.
func ownName(id string) bool { return instanceNameRE.MatchString(id) }

func TestInstanceName(t *testing.T) {
	model := "0c5d3f4e-7a2b-4c1d-8e9f-a1b2c3d4e5f6"
	a := InstanceName(model, "12", "token-1")
	if a != InstanceName(model, "12", "token-1") {
		t.Errorf("not deterministic")
	}
	if !strings.HasPrefix(a, "mu-0c5d3f4e-m12-") || !ownName(a) || len(a) > 63 {
		t.Errorf("InstanceName = %q", a)
	}
	for _, other := range []string{InstanceName(model, "12", "token-2"), InstanceName(model, "13", "token-1"), InstanceName("ffff"+model[4:], "12", "token-1")} {
		if other == a {
			t.Errorf("%q names two launches", a)
		}
	}
	long := InstanceName("UPPER/CASE", strings.Repeat("9", 40), "t")
	if !ownName(long) || len(long) > 63 {
		t.Errorf("long machine id: %q (own %v, %d bytes)", long, ownName(long), len(long))
	}
	for _, id := range []string{"i-providertest-unknown", "mu-x-m0-zz", "t1", ""} {
		if ownName(id) {
			t.Errorf("ownName(%q) = true", id)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		kind muster.ProviderErrorKind
		zone string
	}{
		{"image missing", &APIError{Status: 404, Message: "Image not found"}, muster.ErrZoneIndependent, ""},
		{"bad request", &APIError{Status: 400, Message: "Invalid devices"}, muster.ErrZoneIndependent, ""},
		{"forbidden", &APIError{Status: 403, Message: "not authorized"}, muster.ErrZoneIndependent, ""},
		{"storage full", &APIError{Status: 500, Message: "Failed creating instance from image: write /x: no space left on device"}, muster.ErrCapacity, "a"},
		{"quota", &APIError{Status: 500, Message: "Disk quota exceeded"}, muster.ErrCapacity, "a"},
		{"project limit", &APIError{Status: 400, Message: `Failed checking if instance creation allowed: Quota of 2 on "limits.instances" exceeded`}, muster.ErrCapacity, "a"},
		{"throttled", &APIError{Status: 429, Message: "slow down"}, muster.ErrThrottled, ""},
		{"conflict", &APIError{Status: 409, Message: "busy"}, muster.ErrUnavailable, ""},
		{"server error", &APIError{Status: 500, Message: "boom"}, muster.ErrUnavailable, ""},
		{"transport", errors.New("dial unix /x: connect: no such file or directory"), muster.ErrUnavailable, ""},
		{"already classified", capacityErr("b", "x"), muster.ErrCapacity, "b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(tt.err, "a", "create instance x")
			var pe *muster.ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("got %T %v, want a *muster.ProviderError", err, err)
			}
			if pe.Kind != tt.kind || pe.Zone != tt.zone {
				t.Errorf("got kind %s zone %q, want %s %q (%v)", pe.Kind, pe.Zone, tt.kind, tt.zone, err)
			}
		})
	}
	ctxErr := classify(fmt.Errorf("lxd: GET /1.0: %w", context.Canceled), "a", "list")
	if !errors.Is(ctxErr, context.Canceled) || muster.ProviderErrorKindOf(ctxErr) != 0 {
		t.Errorf("a cancellation: got %v (kind %v), want context.Canceled unclassified", ctxErr, muster.ProviderErrorKindOf(ctxErr))
	}
}

func TestFreeSubnet(t *testing.T) {
	used := []netip.Prefix{netip.MustParsePrefix("10.210.0.0/24"), netip.MustParsePrefix("10.210.1.0/24"), netip.MustParsePrefix("10.210.2.0/23")}
	got, ok := freeSubnet(used, 0)
	if !ok || got.String() != "10.210.4.0/24" {
		t.Errorf("got %v %v, want 10.210.4.0/24", got, ok)
	}
	got, ok = freeSubnet(nil, 511)
	if !ok || got.String() != "10.211.255.0/24" {
		t.Errorf("start 511: got %v %v, want 10.211.255.0/24", got, ok)
	}
	if _, ok := freeSubnet([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, 7); ok {
		t.Errorf("found a free subnet inside a used 10/8")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"512MiB": 512, "2GiB": 2048, "1073741824": 1024, "1GB": 953, "": 0, "x": 0} {
		if got := parseSize(in); got != want {
			t.Errorf("parseSize(%q) = %d, want %d", in, got, want)
		}
	}
}

// fakeDaemon serves h on a unix socket the way LXD does.
func fakeDaemon(t *testing.T, h http.Handler) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "unix.socket")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	c := NewClient(sock)
	t.Cleanup(c.Close)
	return c
}

func TestClientAgainstFakeDaemon(t *testing.T) {
	var waits atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /1.0/instances/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != "x1" {
			w.WriteHeader(404)
			fmt.Fprint(w, `{"type":"error","error":"Instance not found","error_code":404}`)
			return
		}
		fmt.Fprint(w, `{"type":"sync","status":"Success","status_code":200,"metadata":{"name":"x1","status":"Running","config":{"user.muster-model":"m"},"created_at":"2026-01-02T03:04:05Z"}}`)
	})
	mux.HandleFunc("POST /1.0/instances", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("content type %q", r.Header.Get("Content-Type"))
		}
		w.WriteHeader(202)
		fmt.Fprint(w, `{"type":"async","status":"Operation created","status_code":100,"operation":"/1.0/operations/op1","metadata":{"id":"op1","status":"Running","status_code":103}}`)
	})
	mux.HandleFunc("DELETE /1.0/instances/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(202)
		fmt.Fprint(w, `{"type":"async","status":"Operation created","status_code":100,"metadata":{"id":"op2","status":"Running"}}`)
	})
	mux.HandleFunc("GET /1.0/operations/{id}/wait", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "op1": // still running on the first wait, done on the second
			if waits.Add(1) == 1 {
				fmt.Fprint(w, `{"type":"sync","metadata":{"id":"op1","status":"Running","status_code":103}}`)
				return
			}
			fmt.Fprint(w, `{"type":"sync","metadata":{"id":"op1","status":"Success","status_code":200}}`)
		case "op2":
			fmt.Fprint(w, `{"type":"sync","metadata":{"id":"op2","status":"Failure","status_code":400,"err":"Failed to delete: no space left on device"}}`)
		}
	})
	mux.HandleFunc("GET /1.0/slow", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	c := fakeDaemon(t, mux)
	ctx := context.Background()

	in, err := c.Instance(ctx, "x1")
	if err != nil {
		t.Fatal(err)
	}
	if in.Name != "x1" || in.Status != "Running" || in.Config["user.muster-model"] != "m" || in.CreatedAt.Year() != 2026 {
		t.Errorf("Instance: got %+v", in)
	}
	if _, err := c.Instance(ctx, "nope"); !IsNotFound(err) || !strings.Contains(err.Error(), "Instance not found") {
		t.Errorf("missing instance: got %v, want a 404 APIError", err)
	}
	if err := c.CreateInstance(ctx, InstancesPost{Name: "x2"}); err != nil {
		t.Errorf("CreateInstance: %v", err)
	}
	if got := waits.Load(); got != 2 {
		t.Errorf("waited %d times for the operation, want 2", got)
	}
	err = c.DeleteInstance(ctx, "x1")
	var ae *APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "no space left") {
		t.Fatalf("failed operation: got %v, want its error", err)
	}
	if k := muster.ProviderErrorKindOf(classify(err, "z", "delete")); k != muster.ErrCapacity {
		t.Errorf("failed operation classified %s, want capacity", k)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	var out any
	if err := c.get(cctx, "/1.0/slow", &out); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow request: got %v, want context.DeadlineExceeded", err)
	}
	dead := NewClient(filepath.Join(t.TempDir(), "none.socket"))
	_, err = dead.Resources(ctx)
	if k := muster.ProviderErrorKindOf(classify(err, "", "connect")); err == nil || k != muster.ErrUnavailable {
		t.Errorf("no daemon: got %v (%s), want an unavailable error", err, k)
	}
}

// TestPingNeedsTheDatabase: a daemon that answers GET /1.0 while its
// instance list (read from its database) hangs does not pass Ping.
func TestPingNeedsTheDatabase(t *testing.T) {
	var wedged atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /1.0", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"sync","status":"Success","status_code":200,"metadata":{"api_version":"1.0"}}`)
	})
	mux.HandleFunc("GET /1.0/instances", func(w http.ResponseWriter, r *http.Request) {
		if wedged.Load() {
			<-r.Context().Done()
			return
		}
		fmt.Fprint(w, `{"type":"sync","status":"Success","status_code":200,"metadata":["/1.0/instances/a"]}`)
	})
	c := fakeDaemon(t, mux)
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("answering daemon: %v", err)
	}
	wedged.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Ping(ctx); err == nil {
		t.Fatal("Ping passed with the instance list hanging")
	}
}
