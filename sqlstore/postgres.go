package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/musterhq/muster"
)

// isPostgresURL reports whether u names a PostgreSQL database.
func isPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// channelExpr is the NOTIFY channel of the store: one per schema, so that
// stores in other schemas of the same database do not wake each other.
const channelExpr = `'muster_' || left(md5(current_schema()), 20)`

// migrateLockKey is the pg_advisory_xact_lock key taken by migrations.
const migrateLockKey = 0x6d75737465720001

func postgresDialect() *dialect {
	sub, err := fs.Sub(migrationFiles, "migrations/postgres")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &dialect{
		name:       "postgres",
		migrations: sub,
		rebind:     rebindDollar,
		inList:     func(col string) string { return col + " = ANY(?)" },
		listArg:    func(ids []int64) any { return ids },
		isUniqueViolation: func(err error) bool {
			return pgCode(err) == "23505"
		},
		retryable: func(err error) bool {
			c := pgCode(err)
			return c == "40001" || c == "40P01" // serialization failure, deadlock
		},
		forUpdate:       " FOR UPDATE",
		arrays:          true,
		migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied BIGINT NOT NULL)`,
		migrateLock:     `SELECT pg_advisory_xact_lock(` + strconv.FormatInt(migrateLockKey, 10) + `)`,
		notify:          `SELECT pg_notify(` + channelExpr + `, ?)`,
		recordChanges:   recordChangeArrays,
		snapshot:        &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
		now: func(ctx context.Context, _ *Store, q querier) (time.Time, error) {
			var t time.Time
			err := q.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&t)
			return t, err
		},
	}
}

func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// rebindDollar turns the ? placeholders of q into $1, $2, … outside
// quoted strings.
func rebindDollar(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	quoted := false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// openPostgres opens a PostgreSQL store: a pool of connections, one
// connection for leases and one that LISTENs for the changes of every
// process.
func openPostgres(ctx context.Context, url string, o options) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, muster.Errorf(muster.EInvalid, "bad store URL: %v", err) // pgx leaves the password out
	}
	where := fmt.Sprintf("postgres://%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	s := newStore(postgresDialect(), o)
	s.wdb = stdlib.OpenDB(*cfg)
	s.wdb.SetMaxOpenConns(16)
	s.wdb.SetMaxIdleConns(4)
	if err := s.migrate(ctx); err != nil {
		s.wdb.Close()
		return nil, fmt.Errorf("open %s: %w", where, err)
	}
	// PostgreSQL runs writers side by side (row locks order them), so
	// reads and writes share one pool.
	s.rdb = s.wdb
	// Leases on a connection of their own (see Store.ldb), kept open; a
	// broken one is replaced at the next claim.
	s.ldb = stdlib.OpenDB(*cfg)
	s.ldb.SetMaxOpenConns(1)
	s.ldb.SetMaxIdleConns(1)
	s.ldb.SetConnMaxIdleTime(0)
	if err := s.ldb.PingContext(ctx); err != nil {
		s.ldb.Close()
		s.wdb.Close()
		return nil, fmt.Errorf("open %s: lease connection: %w", where, err)
	}
	l, err := listen(ctx, cfg)
	if err != nil {
		s.ldb.Close()
		s.wdb.Close()
		return nil, fmt.Errorf("open %s: listen for changes: %w", where, err)
	}
	s.wg.Add(1)
	go s.listen(cfg, l)
	return s, nil
}

// listen connects and LISTENs on the store's channel.
func listen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, err
	}
	var ch string
	if err := conn.QueryRow(ctx, `SELECT `+channelExpr).Scan(&ch); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{ch}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// listen wakes the watchers of a model on each of its notifications. When
// the connection breaks it wakes every watcher, reconnects with backoff and
// wakes them all again once listening: the watchers then read the change
// log, which holds whatever was missed meanwhile (the poll interval covers
// the rest).
func (s *Store) listen(cfg *pgx.ConnConfig, conn *pgx.Conn) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := 100 * time.Millisecond
	for {
		if conn != nil {
			var err error
			for {
				var n *pgconn.Notification
				if n, err = conn.WaitForNotification(ctx); err != nil {
					break
				}
				s.wake(n.Payload) // the model uuid
			}
			conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("change listener lost its connection", "err", err)
			s.wakeAll()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		c, err := listen(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			s.log.Warn("change listener cannot reconnect", "err", err, "retry", backoff)
			continue
		}
		conn = c
		backoff = 100 * time.Millisecond
		s.log.Info("change listener reconnected")
		s.wakeAll()
	}
}

// recordChangeArrays writes t's changes under rev in one statement: the
// revision_counter row lock is held meanwhile, so round trips count.
func recordChangeArrays(ctx context.Context, t *wtx, rev int64) error {
	n := len(t.changes)
	models, kinds, keys := make([]string, n), make([]string, n), make([]string, n)
	for i, c := range t.changes {
		models[i], kinds[i], keys[i] = c.model, string(c.kind), c.key
	}
	_, err := t.exec(ctx, `INSERT INTO changes (revision, model_uuid, kind, key)
		SELECT ?, m, k, key FROM unnest(?::text[], ?::text[], ?::text[]) AS c(m, k, key)`, rev, models, kinds, keys)
	return err
}
