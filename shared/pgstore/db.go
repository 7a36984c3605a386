// Package pgstore is flagdown's PostgreSQL adapter (pgx v5): the connection pool, migrations, and the
// rides, offers, outbox, processed-events and devices tables. PostgreSQL is the source of truth; every state
// change that others must hear about writes its outbox row in the same transaction.
package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/flagdown/flagdown/migrations"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// DB is the PostgreSQL store: one pool per process.
type DB struct {
	// Pool is the pgx connection pool; every connection has search_path set to Schema.
	Pool *pgxpool.Pool
	// Schema is the schema flagdown's tables live in ("public" unless configured).
	Schema string
	// URL is the connection string the pool was opened with (the relay opens its LISTEN connection from it).
	URL string

	// outboxCommitted is OnOutboxCommit's function (nil: none).
	outboxCommitted atomic.Pointer[func()]
}

// OnOutboxCommit makes f run after every commit, through this DB, of a transaction that wrote an
// outbox row (Tx with InsertOutbox or a writing InsertOutboxOnce, CreateRide); nil removes it. It is
// the in-process wake-up of the outbox relay (outbox.Relay.Wake): a relay in the same process
// publishes the row at once instead of at its next poll. f runs on the committing goroutine, so it
// must not block. Safe to call while the DB is in use; the last call wins.
func (db *DB) OnOutboxCommit(f func()) {
	if f == nil {
		db.outboxCommitted.Store(nil)
		return
	}
	db.outboxCommitted.Store(&f)
}

// committedOutbox runs OnOutboxCommit's function, if any.
func (db *DB) committedOutbox() {
	if f := db.outboxCommitted.Load(); f != nil {
		(*f)()
	}
}

// outboxTx is the pgx.Tx that Tx hands its function: it records whether an outbox row was written
// (markOutbox), so that Tx wakes the relay after the commit.
type outboxTx struct {
	pgx.Tx
	wroteOutbox bool
}

// markOutbox records that tx wrote an outbox row, when tx is Tx's (a transaction begun elsewhere,
// or a savepoint inside Tx's, is not tracked: its rows wait for the relay's poll).
func markOutbox(tx pgx.Tx) {
	if t, ok := tx.(*outboxTx); ok {
		t.wroteOutbox = true
	}
}

// DefaultMaxConns is the pool size when DATABASE_URL sets no pool_max_conns.
const DefaultMaxConns = 32

var schemaRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to url with search_path set to schema (empty means public), creating the schema
// if it is missing (only then does the role need CREATE on the database). It returns an error if
// the URL is invalid or the server is unreachable.
func Open(ctx context.Context, url, schema string) (*DB, error) {
	if schema == "" {
		schema = "public"
	}
	if !schemaRe.MatchString(schema) {
		return nil, fmt.Errorf("pgstore: schema %q must match %s", schema, schemaRe)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse DATABASE_URL: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default (max(4, CPUs)) starves bursts of matches that hold a connection across
		// their Redis round trips; pool_max_conns in DATABASE_URL overrides this.
		cfg.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	// Create the schema only when it is missing, so a role without CREATE on the database (a
	// read-only role running `flagdown verify`) can open an existing one.
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: look up schema %s: %w", schema, err)
	}
	if !exists {
		if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			pool.Close()
			return nil, fmt.Errorf("pgstore: create schema %s: %w", schema, err)
		}
	}
	return &DB{Pool: pool, Schema: schema, URL: url}, nil
}

// Close closes the pool.
func (db *DB) Close() { db.Pool.Close() }

// Migrate applies every embedded migration not yet applied (goose, version table in the schema).
func (db *DB) Migrate(ctx context.Context) error {
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	defer sqlDB.Close()
	return migrate(ctx, sqlDB)
}

func migrate(ctx context.Context, sqlDB *sql.DB) error {
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS)
	if err != nil {
		return fmt.Errorf("pgstore: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// ErrCommitUnknown is wrapped in Tx's error when the COMMIT itself failed: the transaction may
// have committed (the connection broke after the server committed) or not, so the caller must not
// undo effects it took outside PostgreSQL as if it had rolled back (errors.Is).
var ErrCommitUnknown = errors.New("pgstore: the commit's outcome is unknown")

// Tx runs fn in a transaction, committing if fn returns nil and rolling back otherwise. After a
// commit of a transaction that wrote an outbox row it runs the OnOutboxCommit function. An error
// of the COMMIT wraps ErrCommitUnknown.
func (db *DB) Tx(ctx context.Context, fn func(pgx.Tx) error) error {
	raw, err := db.Pool.Begin(ctx)
	if err != nil {
		return dispatch.Unavailable("postgres", err)
	}
	tx := &outboxTx{Tx: raw}
	defer raw.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := raw.Commit(ctx); err != nil {
		return dispatch.Unavailable("postgres", fmt.Errorf("%w: %w", ErrCommitUnknown, err))
	}
	if tx.wroteOutbox {
		db.committedOutbox()
	}
	return nil
}

// ErrNoRows is pgx.ErrNoRows, re-exported so callers need not import pgx.
var ErrNoRows = pgx.ErrNoRows

// IsNoRows reports whether err is a no-rows result.
func IsNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
