package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"io/fs"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations
var migrationFiles embed.FS

// dialect holds everything that differs between SQL databases. The queries
// of this package are written with ? placeholders, ON CONFLICT and
// RETURNING, which SQLite and PostgreSQL both understand; rebind turns the
// placeholders into the dialect's own.
type dialect struct {
	name string
	// migrations holds NNNN_name.sql files applied in order.
	migrations fs.FS
	// rebind rewrites the ? placeholders of q.
	rebind func(q string) string
	// inList returns a condition that col is one of the values of a list
	// passed as ONE argument, built by listArg. It keeps batch reads at one
	// query whatever the batch size.
	inList  func(col string) string
	listArg func(ids []int64) any
	// isUniqueViolation reports whether err is a unique constraint failure.
	isUniqueViolation func(err error) bool
	// arrays says the dialect takes arrays as arguments (unnest), which
	// turns batch writes into one statement.
	arrays bool
	// retryable reports whether a write transaction that failed with err
	// may be run again from the start (a deadlock or serialization
	// failure); nil when none is.
	retryable func(err error) bool
	// forUpdate is appended to the SELECTs of read-modify-write
	// transactions to lock the rows read ("" where the whole database is
	// locked by the write transaction anyway).
	forUpdate string
	// migrationsTable creates the table that records applied migrations.
	migrationsTable string
	// migrateLock, when set, runs first in the migration transaction so
	// that concurrent Opens of an empty database apply migrations once.
	migrateLock string
	// notify, when set, runs in each write transaction that records
	// changes, with the model uuid as argument: it wakes the watchers of
	// other processes.
	notify string
	// recordChanges writes the changes of t under revision rev.
	recordChanges func(ctx context.Context, t *wtx, rev int64) error
	// snapshot are the options of a read transaction that must see one
	// snapshot; nil for the default.
	snapshot *sql.TxOptions
	// now returns the database's clock, read through q (leases and the
	// controller registry use it so that controllers agree on time).
	now func(ctx context.Context, s *Store, q querier) (time.Time, error)
}

func sqliteDialect() *dialect {
	sub, err := fs.Sub(migrationFiles, "migrations/sqlite")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &dialect{
		name:       "sqlite",
		migrations: sub,
		rebind:     func(q string) string { return q },
		inList: func(col string) string {
			return col + " IN (SELECT value FROM json_each(?))"
		},
		listArg: func(ids []int64) any {
			var b strings.Builder
			b.WriteByte('[')
			for i, id := range ids {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(formatID(id))
			}
			b.WriteByte(']')
			return b.String()
		},
		isUniqueViolation: func(err error) bool {
			var e *sqlite.Error
			return errors.As(err, &e) && (e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
		},
		retryable:       func(error) bool { return false },
		recordChanges:   recordChangeRows,
		migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied INTEGER NOT NULL)`,
		// SQLite runs on one machine: the store's clock is the database's.
		now: func(_ context.Context, s *Store, _ querier) (time.Time, error) { return s.clock.Now(), nil },
	}
}
