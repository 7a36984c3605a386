// Package migrations holds flagdown's versioned SQL schema, embedded in every binary and
// applied with goose (see shared/pgstore.Migrate). Files are numbered NNNNN_name.sql and
// never edited after they land; a change is a new file.
package migrations

import "embed"

// FS is the embedded set of migration files.
//
//go:embed *.sql
var FS embed.FS
