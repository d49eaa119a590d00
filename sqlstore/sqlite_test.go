package sqlstore_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/storetest"
	"github.com/musterhq/muster/sqlstore"
)

func openSQLite(tb testing.TB, dir, name string) muster.Store {
	tb.Helper()
	s, err := sqlstore.Open(context.Background(), "sqlite://"+filepath.Join(dir, name+".db"),
		sqlstore.WithPollInterval(50*time.Millisecond), sqlstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	return s
}

func TestSQLiteConformance(t *testing.T) {
	dir := t.TempDir()
	storetest.Run(t, func(tb testing.TB, name string) muster.Store {
		return openSQLite(tb, dir, name)
	})
}

func TestOpenBadURL(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, url string
	}{
		{"other scheme", "mysql://localhost/muster"},
		{"empty", ""},
		{"query", "sqlite://" + filepath.Join(dir, "x.db") + "?mode=ro"},
		{"memory", ":memory:"},
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

func TestOpenBarePathAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "muster.db")
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, path)
	if err != nil {
		t.Fatalf("open bare path: %v", err)
	}
	if _, err := s.CreateModel(ctx, muster.Model{Name: "default", Provider: "sim"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The same file through a URL; migrations are not applied twice.
	s, err = sqlstore.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.Model(ctx, "default"); err != nil {
		t.Fatalf("model after reopen: %v", err)
	}
}

func TestOpenBadPollInterval(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		s, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"), sqlstore.WithPollInterval(d))
		if err == nil {
			s.Close()
		}
		if got := muster.ErrorCode(err); got != muster.EInvalid {
			t.Fatalf("poll interval %s: got %v (code %q), want code %q", d, err, got, muster.EInvalid)
		}
	}
}

// Commits closer together than the watch gap are read together: the two
// machines added one after the other, within the gap of the watcher's
// first read, come in one change set.
func TestWatchGapReadsABurstTogether(t *testing.T) {
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "gap.db"),
		sqlstore.WithWatchGap(time.Second), sqlstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := s.CreateModel(ctx, muster.Model{Name: "gap", Provider: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, m.UUID, 0, muster.ChangeMachine)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	<-w.Changes() // the initial set, read at once

	// Two commits, then the first change set after them.
	ids := []string{addOne(t, s, m.UUID), addOne(t, s, m.UUID)}
	select {
	case cs := <-w.Changes():
		if !slices.Equal(cs.Machines, ids) {
			t.Fatalf("first change set after the burst names %v, want both machines %v", cs.Machines, ids)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no change set after the burst")
	}
}

func TestOpenBadWatchGap(t *testing.T) {
	s, err := sqlstore.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "x.db"), sqlstore.WithWatchGap(-time.Second))
	if err == nil {
		s.Close()
	}
	if !muster.IsCode(err, muster.EInvalid) || !strings.Contains(err.Error(), "watch gap") {
		t.Fatalf("open with a negative watch gap: %v, want an invalid error naming the watch gap", err)
	}
}
