package sqlstore_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sqlstore"
)

// TestOpenFailuresAreOneLine checks S3: every store that cannot be opened
// gives one line naming the store and the cause, and no store.
func TestOpenFailuresAreOneLine(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notDB, []byte("not a database\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url string
		want      []string // substrings of the error
	}{
		{"unknown scheme", "bogus://x", []string{`"bogus://x"`}},
		{"missing directory", "sqlite:///not/a/dir/x.db", []string{"/not/a/dir/x.db", "directory /not/a/dir does not exist"}},
		{"directory is a file", "sqlite://" + notDB + "/x.db", []string{notDB + "/x.db", "is not a directory"}},
		{"not a database", notDB, []string{notDB, "not a database"}},
		{"postgres refuses", "postgres://nobody:secret@127.0.0.1:1/x?connect_timeout=5", []string{"postgres://127.0.0.1:1/x", "refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlstore.Open(context.Background(), tc.url)
			if err == nil {
				s.Close()
				t.Fatalf("open %s: got a store, want an error", tc.url)
			}
			if s != nil {
				t.Errorf("open %s: got a non-nil store with the error", tc.url)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("open %s: got a multi-line error %q, want one line", tc.url, msg)
			}
			if strings.Contains(msg, ":;") {
				t.Errorf("open %s: got %q, want lines joined without a stray colon", tc.url, msg)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("open %s: error %q shows the password", tc.url, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("open %s: got %q, want it to name %q", tc.url, msg, w)
				}
			}
		})
	}
	// The file that is not a database is left as it was.
	if st, err := os.Stat(notDB); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("a file that is not a store: got %v, %v, want it untouched at 0644", st.Mode(), err)
	}
}

// TestNilStoreCloses: a failed Open's nil *Store held in an interface
// closes without a panic (it used to panic at every start failure).
func TestNilStoreCloses(t *testing.T) {
	var s *sqlstore.Store
	var st muster.Store = s
	if err := st.Close(); err != nil {
		t.Fatalf("close a nil store: %v", err)
	}
}

// TestFileModes checks S4: the database and its WAL and shared-memory
// files are 0600 whatever the umask, and an existing wider database is
// tightened. Not parallel: it changes the process's umask.
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	check := func(file string) {
		t.Helper()
		for _, p := range []string{file, file + "-wal", file + "-shm"} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatalf("stat %s: %v", p, err)
			}
			if got := st.Mode().Perm(); got != 0o600 {
				t.Errorf("%s: got mode %v, want 0600", p, fs.FileMode(got))
			}
		}
	}
	n := 0
	open := func(file string) {
		t.Helper()
		n++
		s, err := sqlstore.Open(context.Background(), "sqlite://"+file)
		if err != nil {
			t.Fatal(err)
		}
		// A write makes SQLite create the WAL and shared-memory files.
		if _, err := s.CreateModel(context.Background(), muster.Model{Name: "m" + strings.Repeat("x", n), Provider: "sim"}); err != nil {
			t.Fatal(err)
		}
		check(file)
		s.Close()
	}
	fresh := filepath.Join(dir, "fresh.db")
	open(fresh)

	wide := filepath.Join(dir, "wide.db")
	open(wide)
	for _, p := range []string{wide, wide + "-wal", wide + "-shm"} {
		if err := os.Chmod(p, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	open(wide)
}
