package pgstore_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// withDatabase returns the test server's DATABASE_URL naming database name (and user, when not empty).
func withDatabase(t *testing.T, name, user string) string {
	t.Helper()
	u, err := url.Parse(testkit.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	u.RawPath = "/" + url.PathEscape(name)
	if user != "" {
		u.User = url.User(user)
	}
	return u.String()
}

// admin runs sql on the test server's own database.
func admin(t *testing.T, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testkit.DatabaseURL())
	if err != nil {
		t.Fatalf("testkit: postgres at %s: %v", testkit.DatabaseURL(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestEnsureDatabase(t *testing.T) {
	ctx := context.Background()
	// A name that must be quoted: upper case, a hyphen and a double quote.
	name := `flagdown_T-"q"_` + testkit.ID()
	dbURL := withDatabase(t, name, "")
	t.Cleanup(func() { admin(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") })

	t.Run("CreatesAMissingDatabase", func(t *testing.T) {
		if _, err := pgx.Connect(ctx, dbURL); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("before: connect error %v; want database does not exist", err)
		}
		created, err := pgstore.EnsureDatabase(ctx, dbURL)
		if err != nil || !created {
			t.Fatalf("EnsureDatabase = %v, %v; want created", created, err)
		}
		db, err := pgstore.Open(ctx, dbURL, "")
		if err != nil {
			t.Fatalf("open the created database: %v", err)
		}
		defer db.Close()
		var got string
		if err := db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&got); err != nil || got != name {
			t.Fatalf("current_database() = %q, %v; want %q", got, err, name)
		}
		if err := db.Migrate(ctx); err != nil {
			t.Fatalf("migrate the created database: %v", err)
		}
	})
	t.Run("LeavesAnExistingOneAlone", func(t *testing.T) {
		created, err := pgstore.EnsureDatabase(ctx, dbURL)
		if err != nil || created {
			t.Fatalf("EnsureDatabase = %v, %v; want not created, no error", created, err)
		}
	})
}

// TestEnsureDatabaseWithoutPrivilege: a role that may not create databases gets the command to run.
func TestEnsureDatabaseWithoutPrivilege(t *testing.T) {
	ctx := context.Background()
	id := testkit.ID()
	role, name := "fd_nocreatedb_"+id, "flagdown_missing_"+id
	admin(t, "CREATE ROLE "+role+" LOGIN NOCREATEDB")
	t.Cleanup(func() { admin(t, "DROP ROLE IF EXISTS "+role) })
	dbURL := withDatabase(t, name, role)
	if conn, err := pgx.Connect(ctx, withDatabase(t, pgstore.MaintenanceDatabase, role)); err != nil {
		t.Skipf("the test server does not let a new role in without a password (%v)", err)
	} else {
		conn.Close(ctx)
	}

	created, err := pgstore.EnsureDatabase(ctx, dbURL)
	if err == nil || created {
		t.Fatalf("EnsureDatabase = %v, %v; want an error", created, err)
	}
	want := `-c 'CREATE DATABASE "` + name + `" OWNER "` + role + `"'`
	if msg := err.Error(); !strings.Contains(msg, "psql -h ") || !strings.Contains(msg, want) || !strings.Contains(msg, "permission denied") {
		t.Errorf("error %q does not say why (permission denied) and the command (psql ... %s)", msg, want)
	}
	conn, err := pgx.Connect(ctx, testkit.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d databases named %s, %v; want none", n, name, err)
	}
}

// TestDropSchema: DropSchema removes a schema with its tables and refuses public and bad names.
func TestDropSchema(t *testing.T) {
	ctx := context.Background()
	schema := "drop_" + strings.ToLower(strings.ReplaceAll(testkit.ID(), "-", "_"))
	db, err := pgstore.Open(ctx, testkit.DatabaseURL(), schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := pgstore.DropSchema(ctx, testkit.DatabaseURL(), schema); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, testkit.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil || exists {
		t.Errorf("schema %s exists after DropSchema (%v)", schema, err)
	}
	for _, bad := range []string{"", "public", "Robert'); DROP TABLE rides;--"} {
		if err := pgstore.DropSchema(ctx, testkit.DatabaseURL(), bad); err == nil {
			t.Errorf("DropSchema(%q): want an error", bad)
		}
	}
}
