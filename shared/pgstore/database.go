package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MaintenanceDatabase is the database every PostgreSQL server has, which EnsureDatabase connects to
// when the one DATABASE_URL names is missing.
const MaintenanceDatabase = "postgres"

// PostgreSQL error codes EnsureDatabase tells apart.
const (
	codeInvalidCatalogName = "3D000" // the database does not exist
	codeDuplicateDatabase  = "42P04" // another process created it first
)

// EnsureDatabase creates the database url names when it does not exist: it connects with the same
// URL to the server's maintenance database (MaintenanceDatabase) and runs CREATE DATABASE with the
// name quoted as an identifier. It reports whether it created the database. When the database is
// missing and cannot be created (no CREATEDB privilege, no access to the maintenance database), the
// error names the command that creates it. Any other connection error is returned as is, wrapped.
func EnsureDatabase(ctx context.Context, url string) (created bool, err error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return false, fmt.Errorf("pgstore: parse DATABASE_URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return false, conn.Close(ctx)
	}
	if !isCode(err, codeInvalidCatalogName) || cfg.Database == MaintenanceDatabase {
		return false, fmt.Errorf("pgstore: connect: %w", err)
	}
	name := cfg.Database
	mcfg := cfg.Copy()
	mcfg.Database = MaintenanceDatabase
	mconn, err := pgx.ConnectConfig(ctx, mcfg)
	if err != nil {
		return false, missingDatabaseError(cfg, fmt.Errorf("connect to the maintenance database %q: %w", MaintenanceDatabase, err))
	}
	defer mconn.Close(ctx) //nolint:errcheck // nothing to do about a failed goodbye
	if _, err := mconn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		if isCode(err, codeDuplicateDatabase) {
			return false, nil
		}
		return false, missingDatabaseError(cfg, err)
	}
	return true, nil
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// missingDatabaseError says that cfg's database is missing, why it could not be created, and the
// command that creates it as a role allowed to (the server's superuser, typically postgres), owned
// by cfg's user.
func missingDatabaseError(cfg *pgx.ConnConfig, why error) error {
	sql := "CREATE DATABASE " + pgx.Identifier{cfg.Database}.Sanitize() + " OWNER " + pgx.Identifier{cfg.User}.Sanitize()
	cmd := fmt.Sprintf("psql -h %s -p %d -U postgres -d %s -c %s",
		shellQuote(cfg.Host), cfg.Port, MaintenanceDatabase, shellQuote(sql))
	return fmt.Errorf("pgstore: database %q does not exist and could not be created (%v); create it as a role that may "+
		"(the server's superuser, or one with CREATEDB), e.g.: %s", cfg.Database, why, cmd)
}

// shellQuote quotes s for a POSIX shell (single quotes; a single quote inside becomes '\”).
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// DropSchema drops schema and everything in it (DROP SCHEMA IF EXISTS … CASCADE), for a clean slate
// (`flagdown migrate --fresh`). It refuses public, the schema a deployment without
// FLAGDOWN_DB_SCHEMA keeps its rides in, and a name Open would refuse.
func DropSchema(ctx context.Context, url, schema string) error {
	if schema == "" || schema == "public" {
		return errors.New("pgstore: refusing to drop schema public: set FLAGDOWN_DB_SCHEMA to the schema to start afresh")
	}
	if !schemaRe.MatchString(schema) {
		return fmt.Errorf("pgstore: schema %q must match %s", schema, schemaRe)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("pgstore: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("pgstore: drop schema %s: %w", schema, err)
	}
	return nil
}
