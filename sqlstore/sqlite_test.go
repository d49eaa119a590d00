package sqlstore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/storetest"
	"github.com/musterhq/muster/sqlstore"
)

func openSQLite(tb testing.TB, dir, name string) muster.Store {
	tb.Helper()
	s, err := sqlstore.Open(context.Background(), "sqlite://"+filepath.Join(dir, name+".db"), sqlstore.WithPollInterval(50*time.Millisecond))
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
