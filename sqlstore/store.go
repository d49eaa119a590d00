// Package sqlstore is muster's state store on SQL databases: SQLite through
// modernc.org/sqlite (the embedded default) and PostgreSQL through pgx,
// which several controllers can share. Models, machines, the event
// log, controller configuration and a change log live in one database whose
// schema is migrated at Open; every write that a watcher can see records
// its change in the same transaction, so watchers never miss a change, even
// across restarts.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

var _ muster.Store = (*Store)(nil)

// Store is a muster.Store on an SQL database. Its methods are safe for
// concurrent use.
type Store struct {
	d   *dialect
	wdb *sql.DB // writes: one connection, so writers queue instead of failing busy
	rdb *sql.DB // reads: several connections in parallel
	// ldb claims and releases leases. On PostgreSQL it is a connection of
	// its own, outside the pool the other writes go through, so that no
	// load of theirs can delay a renewal; on SQLite, whose writes queue on
	// one connection anyway, it is wdb.
	ldb   *sql.DB
	clock muster.Clock
	log   *slog.Logger
	poll  time.Duration
	gap   time.Duration // WithWatchGap

	stmtMu sync.Mutex
	wstmts map[string]*sql.Stmt // prepared on wdb, keyed by query text
	rstmts map[string]*sql.Stmt // prepared on rdb

	mu     sync.Mutex
	notify map[string]chan struct{} // model → closed (and dropped) when it changes
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
	once   sync.Once
}

// Option configures Open.
type Option func(*options)

type options struct {
	clock muster.Clock
	log   *slog.Logger
	poll  time.Duration
	// pollSet says WithPollInterval was given.
	pollSet bool
	gap     time.Duration
}

// WithClock sets the clock that stamps created, updated and event times;
// default muster.SystemClock.
func WithClock(c muster.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithPollInterval sets how often watchers read the change log when
// nothing woke them. On SQLite the writes of other processes are seen this
// way (default 250ms); on PostgreSQL NOTIFY wakes the watchers and polling
// is a safety net (default 5s).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) { o.poll, o.pollSet = d, true }
}

// WithWatchGap sets the least time between two reads of a watcher
// (default DefaultWatchGap): commits that follow each other closer than
// that (a burst) are read and delivered together, so a watcher and its
// consumer handle a few larger change sets instead of one per commit. A
// commit after a quiet spell is read at once. Zero reads every commit.
func WithWatchGap(d time.Duration) Option { return func(o *options) { o.gap = d } }

// DefaultWatchGap is the watchers' least time between reads: a tenth of
// the per-event target's 50 ms, while a burst of agents enrolling commits
// every few milliseconds.
const DefaultWatchGap = 20 * time.Millisecond

// Open opens the store at url, creating the database schema and applying
// migrations as needed:
//
//   - "sqlite:///abs/path/muster.db" or a bare file path: SQLite;
//   - "postgres://user:password@host:port/database?sslmode=disable" (or
//     "postgresql://…"): PostgreSQL, with pgx's URL parameters; a
//     search_path parameter selects the schema, which must exist.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o := options{clock: muster.SystemClock, log: slog.Default(), gap: DefaultWatchGap}
	for _, opt := range opts {
		opt(&o)
	}
	pg := isPostgresURL(url)
	switch {
	case !o.pollSet && pg:
		o.poll = 5 * time.Second // a safety net: NOTIFY wakes the watchers
	case !o.pollSet:
		o.poll = 250 * time.Millisecond
	case o.poll <= 0:
		return nil, muster.Errorf(muster.EInvalid, "bad poll interval %s: want more than zero", o.poll)
	}
	if o.gap < 0 {
		return nil, muster.Errorf(muster.EInvalid, "bad watch gap %s: want zero or more", o.gap)
	}
	var s *Store
	var err error
	if pg {
		s, err = openPostgres(ctx, url, o)
	} else {
		s, err = openSQLite(ctx, url, o)
	}
	if err != nil {
		// Some drivers' errors span lines (pgx's connect errors do); a
		// start failure is one line (S3).
		return nil, oneLine{err}
	}
	return s, nil
}

// oneLine is an error printed on one line; errors.As and muster.ErrorCode
// still see what it wraps.
type oneLine struct{ err error }

func (e oneLine) Error() string {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(e.err.Error(), "\n", "; ")), " ")
	return strings.ReplaceAll(msg, ":; ", ": ") // a line that ended in a colon
}
func (e oneLine) Unwrap() error { return e.err }

func openSQLite(ctx context.Context, url string, o options) (*Store, error) {
	file, err := sqlitePath(url)
	if err != nil {
		return nil, err
	}
	if err := prepareSQLiteFile(file); err != nil {
		return nil, err
	}
	s := newStore(sqliteDialect(), o)
	// WAL lets readers run beside the writer; synchronous=NORMAL is safe
	// in WAL mode (a power loss may lose the last commits, never corrupt).
	pragmas := "_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	s.wdb, err = sql.Open("sqlite", file+"?_pragma=journal_mode(WAL)&"+pragmas+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	s.ldb = s.wdb
	if err := s.migrate(ctx); err != nil {
		s.wdb.Close()
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	if err := makeSQLitePrivate(file); err != nil {
		s.wdb.Close()
		return nil, err
	}
	s.rdb, err = sql.Open("sqlite", file+"?"+pragmas)
	if err != nil {
		s.wdb.Close()
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	s.rdb.SetMaxOpenConns(8)
	s.rdb.SetMaxIdleConns(8)
	return s, nil
}

func newStore(d *dialect, o options) *Store {
	return &Store{
		d:      d,
		clock:  o.clock,
		log:    o.log,
		poll:   o.poll,
		gap:    o.gap,
		notify: map[string]chan struct{}{},
		done:   make(chan struct{}),
		wstmts: map[string]*sql.Stmt{},
		rstmts: map[string]*sql.Stmt{},
	}
}

// prepareSQLiteFile checks the database's directory and creates the file
// 0600 whatever the umask (S4): the database holds the CA key. SQLite
// gives the WAL and shared-memory files it creates the database's mode.
func prepareSQLiteFile(file string) error {
	dir := filepath.Dir(file)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return muster.Errorf(muster.EInvalid, "open store %s: directory %s does not exist", file, dir)
	case err != nil:
		return fmt.Errorf("open store %s: %w", file, err)
	case !st.IsDir():
		return muster.Errorf(muster.EInvalid, "open store %s: %s is not a directory", file, dir)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open store %s: %w", file, errors.Unwrap(err))
	}
	return f.Close()
}

// makeSQLitePrivate tightens an existing database and its WAL and
// shared-memory files to 0600. It runs once the file has proved to be a
// muster database, so a wrong --store path never changes another file.
func makeSQLitePrivate(file string) error {
	for _, p := range []string{file, file + "-wal", file + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("open store %s: make %s private: %w", file, p, errors.Unwrap(err))
		}
	}
	return nil
}

// sqlitePath returns the file path of a sqlite URL or bare path.
func sqlitePath(u string) (string, error) {
	p := u
	if strings.Contains(u, "://") {
		scheme, rest, _ := strings.Cut(u, "://")
		if scheme != "sqlite" {
			return "", muster.Errorf(muster.EInvalid, "bad store URL %q: want sqlite:///path/to/muster.db, postgres://… or a file path", u)
		}
		unescaped, err := url.PathUnescape(rest)
		if err != nil {
			return "", muster.Errorf(muster.EInvalid, "bad store URL %q: %v", u, err)
		}
		p = unescaped
	}
	if p == "" || strings.ContainsAny(p, "?#") || p == ":memory:" || strings.HasPrefix(p, "file:") {
		return "", muster.Errorf(muster.EInvalid, "bad store path %q: want a file path without ? or #", u)
	}
	return p, nil
}

// Close stops every watcher (their Err says the store closed) and closes
// the database. It is safe to call more than once.
func (s *Store) Close() error {
	if s == nil {
		return nil // a failed Open's result, held in an interface
	}
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		s.mu.Unlock()
		s.wg.Wait()
		// Closed outside stmtMu: closing waits for each statement's
		// connections (see stmt).
		s.stmtMu.Lock()
		var sts []*sql.Stmt
		for _, st := range s.wstmts {
			sts = append(sts, st)
		}
		for _, st := range s.rstmts {
			sts = append(sts, st)
		}
		s.stmtMu.Unlock()
		for _, st := range sts {
			st.Close()
		}
		err = errors.Join(s.rdb.Close(), s.wdb.Close())
		if s.ldb != s.wdb {
			err = errors.Join(err, s.ldb.Close())
		}
	})
	return err
}

func (s *Store) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return nil
}

var errClosed = muster.Errorf(muster.EUnavailable, "store is closed")

// migrate applies the migrations that are not applied yet, in one
// transaction.
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(s.d.migrations, "*.sql")
	if err != nil {
		return err
	}
	type migration struct {
		version int
		name    string
	}
	var ms []migration
	for _, n := range names {
		num, _, ok := strings.Cut(path.Base(n), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return fmt.Errorf("bad migration file name %q: want NNNN_name.sql", n)
		}
		ms = append(ms, migration{v, n})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })

	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin migrations: %w", err)
	}
	defer tx.Rollback()
	if s.d.migrateLock != "" {
		if _, err := tx.ExecContext(ctx, s.d.migrateLock); err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.migrationsTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if n := len(ms); n > 0 && current > ms[n-1].version {
		return muster.Errorf(muster.EInvalid, "database schema version %d is newer than this muster knows (%d)", current, ms[n-1].version)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		body, err := fs.ReadFile(s.d.migrations, m.name)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`), m.version, s.clock.Now().UnixNano()); err != nil {
			return fmt.Errorf("record migration %s: %w", m.name, err)
		}
		s.log.Info("schema migrated", "version", m.version, "name", m.name)
	}
	return tx.Commit()
}

// change is one change log entry of a write transaction.
type change struct {
	model string
	kind  muster.ChangeKind
	key   string
}

// wtx is a write transaction that collects its changes.
type wtx struct {
	tx       *sql.Tx
	s        *Store
	changes  []change
	seen     map[change]bool
	uncached map[string]bool // queries to prepare once the transaction is over
}

// stmtCtx is the context a write transaction's statements run with: the
// caller's without its cancellation. A cancelled caller still ends the
// transaction (database/sql rolls it back once the statement in progress
// returns, and later statements fail), but no statement is interrupted
// halfway, and the SQLite driver sets up no watcher goroutine for each of
// the thousands of statements a busy controller runs a second.
func stmtCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

func (t *wtx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.prepare(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(stmtCtx(ctx), args...)
}

func (t *wtx) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := t.prepare(ctx, q)
	if err != nil {
		// A Row carries its error only when made by database/sql; run the
		// query unprepared to get one.
		return t.tx.QueryRowContext(stmtCtx(ctx), t.s.d.rebind(q), args...)
	}
	return st.QueryRowContext(stmtCtx(ctx), args...)
}

func (t *wtx) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := t.prepare(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(stmtCtx(ctx), args...)
}

// prepare returns q prepared for the transaction. Statements are prepared
// once on the write connection and reused by every transaction; a query
// met for the first time is prepared on the transaction alone (the write
// connection is busy with it) and cached after the transaction ends.
func (t *wtx) prepare(ctx context.Context, q string) (*sql.Stmt, error) {
	t.s.stmtMu.Lock()
	st, ok := t.s.wstmts[q]
	t.s.stmtMu.Unlock()
	if ok {
		return t.tx.StmtContext(ctx, st), nil
	}
	if t.uncached == nil {
		t.uncached = map[string]bool{}
	}
	t.uncached[q] = true
	return t.tx.PrepareContext(ctx, t.s.d.rebind(q))
}

// stmt returns the cached statement of q on db. It does not hold stmtMu
// while preparing: preparing on wdb waits for the write connection, whose
// transaction may itself need the cache.
func (s *Store) stmt(ctx context.Context, db *sql.DB, cache map[string]*sql.Stmt, q string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	st, ok := cache[q]
	s.stmtMu.Unlock()
	if ok {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, s.d.rebind(q))
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", q, err)
	}
	s.stmtMu.Lock()
	old, ok := cache[q]
	if !ok {
		cache[q] = st
	}
	s.stmtMu.Unlock()
	if ok {
		// Never under stmtMu: closing waits for the lock of every
		// connection the statement is prepared on, and a transaction on
		// one of them may be waiting, in the database, for a row lock
		// held by a transaction that waits for stmtMu (wtx.prepare): a
		// deadlock seen in CI on PostgreSQL.
		st.Close()
		return old, nil
	}
	return st, nil
}

// read returns q prepared for reads.
func (s *Store) read(ctx context.Context, q string) (*sql.Stmt, error) {
	return s.stmt(ctx, s.rdb, s.rstmts, q)
}

// queryRow runs a one-row read.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := s.read(ctx, q)
	if err != nil {
		// A Row carries its error only when made by database/sql; run the
		// query unprepared to get one.
		return s.rdb.QueryRowContext(ctx, s.d.rebind(q), args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// query runs a read.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.read(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// change records a change to be written with the transaction.
func (t *wtx) change(model string, kind muster.ChangeKind, key string) {
	c := change{model, kind, key}
	if t.seen[c] {
		return
	}
	if t.seen == nil {
		t.seen = map[change]bool{}
	}
	t.seen[c] = true
	t.changes = append(t.changes, c)
}

// write runs fn in a write transaction, writes the changes it recorded
// under a new revision and commits. Watchers are woken after the commit.
func (s *Store) write(ctx context.Context, fn func(t *wtx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := s.writeOnce(ctx, fn)
		if err == nil || attempt == maxWriteAttempts || !s.d.retryable(err) || ctx.Err() != nil {
			return err
		}
		s.log.Debug("write transaction retried", "attempt", attempt, "err", err)
	}
}

// maxWriteAttempts bounds the runs of a write transaction that keeps
// failing with retryable errors (deadlocks between concurrent writers).
const maxWriteAttempts = 5

func (s *Store) writeOnce(ctx context.Context, fn func(t *wtx) error) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	t := &wtx{tx: tx, s: s}
	defer s.cacheWrites(t)
	if err := fn(t); err != nil {
		return err
	}
	models := t.seenModels()
	if s.d.notify != "" {
		// Delivered at commit; sent before the revision is taken to keep
		// the revision_counter row lock short.
		for _, model := range sortedKeys(models) {
			if _, err := t.exec(ctx, s.d.notify, model); err != nil {
				return fmt.Errorf("notify change: %w", err)
			}
		}
	}
	if len(t.changes) > 0 {
		// The revision is taken last: its row lock, held until the commit,
		// orders revisions like commits.
		var rev int64
		if err := t.queryRow(ctx, `UPDATE revision_counter SET revision = revision + 1 WHERE one = 1 RETURNING revision`).Scan(&rev); err != nil {
			return fmt.Errorf("next revision: %w", err)
		}
		if err := s.d.recordChanges(ctx, t, rev); err != nil {
			return fmt.Errorf("record changes: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for model := range models {
		s.wake(model)
	}
	return nil
}

// recordChangeRows writes t's changes under rev, changesPerInsert to a
// statement.
func recordChangeRows(ctx context.Context, t *wtx, rev int64) error {
	return powerChunks(len(t.changes), changesPerInsert, func(i, k int) error {
		stmt, err := t.prepare(ctx, changeInserts[k])
		if err != nil {
			return err
		}
		defer stmt.Close()
		args := make([]any, 0, 4*k)
		for _, c := range t.changes[i : i+k] {
			args = append(args, rev, c.model, string(c.kind), c.key)
		}
		_, err = stmt.ExecContext(stmtCtx(ctx), args...)
		return err
	})
}

// changesPerInsert is how many change rows one SQLite insert writes at
// most (a power of two).
const changesPerInsert = 64

// changeInserts are the SQLite inserts of 1, 2, 4, … changesPerInsert
// change rows, by count.
var changeInserts = multiRowSQL(`INSERT INTO changes (revision, model_uuid, kind, key) VALUES `, 4, changesPerInsert)

// multiRowSQL returns head followed by 1, 2, 4, … most rows of cols
// placeholders each (an insert's VALUES, or a VALUES table), by row
// count: built once, not per statement.
func multiRowSQL(head string, cols, most int) map[int]string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	m := map[int]string{}
	for k := 1; k <= most; k *= 2 {
		m[k] = head + strings.TrimSuffix(strings.Repeat(row+", ", k), ", ")
	}
	return m
}

// powerChunks calls fn(i, k) for consecutive chunks [i, i+k) of n items:
// chunks of most (a power of two) while they fit, then the largest powers
// of two left, so that a store caches one statement per chunk size (at
// most log2(most)+1), not one per length. The per-statement cost of a
// SQLite insert is most of a small row's.
func powerChunks(n, most int, fn func(i, k int) error) error {
	for i := 0; i < n; {
		k := most
		for k > n-i {
			k /= 2
		}
		if err := fn(i, k); err != nil {
			return err
		}
		i += k
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// seenModels returns the models that t changed.
func (t *wtx) seenModels() map[string]bool {
	out := map[string]bool{}
	for _, c := range t.changes {
		out[c.model] = true
	}
	return out
}

// wake wakes the watchers of a model to read the change log.
func (s *Store) wake(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.notify[model]; ok {
		close(ch)
		delete(s.notify, model)
	}
}

// wakeAll wakes every watcher of the store.
func (s *Store) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for model, ch := range s.notify {
		close(ch)
		delete(s.notify, model)
	}
}

// cacheWrites prepares the queries t met for the first time on the write
// connection, which t no longer holds once rolled back or committed.
func (s *Store) cacheWrites(t *wtx) {
	t.tx.Rollback() // no-op after Commit; frees the connection
	for q := range t.uncached {
		if _, err := s.stmt(context.Background(), s.wdb, s.wstmts, q); err != nil {
			// Not fatal: the query is prepared per transaction until then.
			s.log.Debug("prepare statement", "err", err)
		}
	}
}

// notifier returns a channel closed at the next change of model.
func (s *Store) notifier(model string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.notify[model]
	if !ok {
		ch = make(chan struct{})
		s.notify[model] = ch
	}
	return ch
}

// Revision returns the newest revision of the change log.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	var rev int64
	if err := s.queryRow(ctx, `SELECT revision FROM revision_counter WHERE one = 1`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("read revision: %w", err)
	}
	return rev, nil
}

// querier is what reads need from *sql.DB, *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

const modelExists = `SELECT 1 FROM models WHERE uuid = ?`

// checkModel returns ENotFound unless the model exists.
func (s *Store) checkModel(ctx context.Context, modelUUID string) error {
	return modelFound(s.queryRow(ctx, modelExists, modelUUID), modelUUID)
}

// checkModel returns ENotFound unless the model exists.
func (t *wtx) checkModel(ctx context.Context, modelUUID string) error {
	return modelFound(t.queryRow(ctx, modelExists, modelUUID), modelUUID)
}

func modelFound(row *sql.Row, modelUUID string) error {
	var one int
	err := row.Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return muster.Errorf(muster.ENotFound, "model %q not found", modelUUID)
	}
	if err != nil {
		return fmt.Errorf("read model %s: %w", modelUUID, err)
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

// parseID parses a machine id in its canonical form ("0", "17").
func parseID(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || formatID(n) != s {
		return 0, false
	}
	return n, true
}

// parseIDs keeps the ids that can name a machine, without repeats.
func parseIDs(ids []string) []int64 {
	out := make([]int64, 0, len(ids))
	seen := make(map[int64]bool, len(ids))
	for _, s := range ids {
		if n, ok := parseID(s); ok && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
