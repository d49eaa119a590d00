package sqlstore

import (
	"embed"
	"errors"
	"io/fs"
	"strings"

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
	}
}
