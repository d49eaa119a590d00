package sqlstore_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/storetest"
	"github.com/musterhq/muster/sqlstore"
)

// pgSchemas gives each store name of a test its own schema of the
// database named by MUSTER_TEST_POSTGRES, dropped when the test ends.
type pgSchemas struct {
	base    string
	admin   *sql.DB
	prefix  string
	durable bool // commits wait for the WAL flush (benchmarks)

	mu      sync.Mutex
	schemas map[string]string // store name → schema
}

// postgresURL returns MUSTER_TEST_POSTGRES or skips the test.
func postgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("MUSTER_TEST_POSTGRES")
	if u == "" {
		tb.Skip("set MUSTER_TEST_POSTGRES=postgres://user:password@127.0.0.1:5432/db?sslmode=disable to run the PostgreSQL tests")
	}
	return u
}

func newPGSchemas(tb testing.TB) *pgSchemas {
	tb.Helper()
	base := postgresURL(tb)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatalf("open %s: %v", base, err)
	}
	if err := admin.PingContext(context.Background()); err != nil {
		admin.Close()
		tb.Fatalf("connect to MUSTER_TEST_POSTGRES: %v", err)
	}
	var r [4]byte
	rand.Read(r[:])
	p := &pgSchemas{base: base, admin: admin, prefix: "mt_" + hex.EncodeToString(r[:]) + "_", schemas: map[string]string{}}
	tb.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		defer admin.Close()
		if len(p.schemas) == 0 {
			return
		}
		// One statement: one commit for every schema of the test.
		var names []string
		for _, schema := range p.schemas {
			names = append(names, `"`+schema+`"`)
		}
		if _, err := admin.Exec(`DROP SCHEMA IF EXISTS ` + strings.Join(names, ", ") + ` CASCADE`); err != nil {
			tb.Errorf("drop schemas: %v", err)
		}
	})
	return p
}

// url returns the URL of the store called name, creating its schema the
// first time.
func (p *pgSchemas) url(tb testing.TB, name string) string {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	schema, ok := p.schemas[name]
	if !ok {
		schema = p.prefix + name
		if len(schema) > 63 {
			sum := sha256.Sum256([]byte(name))
			schema = schema[:50] + hex.EncodeToString(sum[:6])
		}
		if _, err := p.admin.Exec(`CREATE SCHEMA "` + schema + `"`); err != nil {
			tb.Fatalf("create schema %s: %v", schema, err)
		}
		p.schemas[name] = schema
	}
	u, err := url.Parse(p.base)
	if err != nil {
		tb.Fatalf("parse MUSTER_TEST_POSTGRES: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	if !p.durable {
		// The tests never crash the server: commits need not wait for
		// the WAL to reach the disk, which keeps the suite fast on slow
		// disks.
		q.Set("synchronous_commit", "off")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (p *pgSchemas) open(tb testing.TB, name string, opts ...sqlstore.Option) *sqlstore.Store {
	tb.Helper()
	opts = append([]sqlstore.Option{sqlstore.WithPollInterval(50 * time.Millisecond), sqlstore.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	s, err := sqlstore.Open(context.Background(), p.url(tb, name), opts...)
	if err != nil {
		tb.Fatalf("open store %s: %v", name, err)
	}
	return s
}

func TestPostgresConformance(t *testing.T) {
	p := newPGSchemas(t)
	storetest.Run(t, func(tb testing.TB, name string) muster.Store {
		// No polling: every wake-up must come from the store's own
		// commits or from NOTIFY.
		return p.open(tb, name, sqlstore.WithPollInterval(never))
	})
}

// TestPostgresConcurrentOpen opens one empty database from several stores
// at once: the migrations are applied once, under the advisory lock.
func TestPostgresConcurrentOpen(t *testing.T) {
	p := newPGSchemas(t)
	u := p.url(t, "concurrent_open")
	const n = 4
	stores := make([]*sqlstore.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = sqlstore.Open(context.Background(), u, sqlstore.WithLogger(slog.New(slog.DiscardHandler)))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	ctx := context.Background()
	m, err := stores[0].CreateModel(ctx, muster.Model{Name: "m", Provider: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := stores[n-1].Model(ctx, m.UUID); err != nil || got.Name != "m" {
		t.Fatalf("model through another store: got %v (err %v), want m", got.Name, err)
	}
}

// TestPostgresOpenFails: a server that does not answer and a schema that
// does not exist are errors at Open, not at the first use.
func TestPostgresOpenFails(t *testing.T) {
	base := postgresURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "muster_no_such_schema")
	u.RawQuery = q.Encode()
	for _, tc := range []struct {
		name, url string
	}{
		{"no server", "postgres://u:p@127.0.0.1:1/db?sslmode=disable&connect_timeout=5"},
		{"no schema", u.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlstore.Open(context.Background(), tc.url, sqlstore.WithLogger(slog.New(slog.DiscardHandler)))
			if err == nil {
				s.Close()
				t.Fatalf("open %s: got no error, want one", tc.name)
			}
		})
	}
}

func TestOpenBadPostgresURL(t *testing.T) {
	for _, tc := range []struct {
		name, url string
	}{
		{"bad port", "postgres://u:p@127.0.0.1:notaport/db"},
		{"bad param", "postgres://u:p@127.0.0.1:5432/db?sslmode=sometimes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlstore.Open(context.Background(), tc.url)
			if err == nil {
				s.Close()
			}
			if got := muster.ErrorCode(err); got != muster.EInvalid {
				t.Fatalf("open %q: got %v (code %q), want code %q", tc.url, err, got, muster.EInvalid)
			}
		})
	}
}
