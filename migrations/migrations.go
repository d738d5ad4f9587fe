package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
)

// MigrationsTable is the table in which [Apply] and the migrate tool record
// the version of redfence's schema. It is not golang-migrate's default
// (schema_migrations), so the application can keep its own history there.
const MigrationsTable = "redfence_schema_migrations"

var (
	// ErrDirty means an earlier migration failed half-way: the schema is in
	// an unknown state and Apply refuses to continue. Inspect the database,
	// repair it by hand, then record the right version with
	// "migrate ... force VERSION". The returned error also names the version.
	ErrDirty = errors.New("migrations: schema is dirty")

	// ErrNoDatabase means the *sql.DB given to Apply has no default database
	// selected (its DSN ends in "/"), so there is nowhere to create tables.
	ErrNoDatabase = errors.New("migrations: no database selected in the DSN")

	// ErrInvalidTable is returned by [ApplyFS] for a history table name that
	// is not a plain identifier (letters, digits, '_' and '$', at most 64
	// bytes, not all digits); nothing is sent to the database.
	ErrInvalidTable = errors.New("migrations: invalid migrations table name")
)

//go:embed *.sql
var files embed.FS

// Files returns the embedded migration files (NNNN_title.up.sql and
// .down.sql at the root of the file system), for tools that apply migrations
// themselves.
func Files() fs.FS { return files }

// Apply brings the schema of the database selected by db up to the newest
// version. It is idempotent: on an up-to-date schema it changes nothing and
// returns nil. Concurrent calls, from one process or several, are serialised
// by a MySQL named lock (GET_LOCK) held by golang-migrate; a caller that
// cannot take it within 10 s gets an error.
//
// ctx governs the wait for a connection and the stop between two migration
// files; a statement already sent runs to its end. Apply does not close db.
//
// A schema left dirty by an interrupted migration gives an error matching
// [ErrDirty]; a DSN without a database gives [ErrNoDatabase].
func Apply(ctx context.Context, db *sql.DB) error {
	return ApplyFS(ctx, db, files, MigrationsTable)
}

// ApplyFS is [Apply] for an application's own schema: it applies the
// golang-migrate files (NNNN_title.up.sql / .down.sql) at the root of fsys,
// recording their version in table, so that the application's history and
// redfence's ([MigrationsTable]) never mix. Use [fs.Sub] for files kept in a
// directory of an embed.FS. Everything said of Apply holds here too.
func ApplyFS(ctx context.Context, db *sql.DB, fsys fs.FS, table string) (err error) {
	if db == nil {
		return errors.New("migrations: nil *sql.DB")
	}
	if fsys == nil {
		return errors.New("migrations: nil file system")
	}
	if err := checkTable(table); err != nil {
		return err
	}
	return run(ctx, db, fsys, table, (*migrate.Migrate).Up)
}

// checkTable accepts the unquoted identifiers MySQL and MariaDB accept without
// quoting, which the history table name is spliced into SQL as.
func checkTable(table string) error {
	if table == "" || len(table) > 64 {
		return fmt.Errorf("%w: %q (1 to 64 bytes)", ErrInvalidTable, table)
	}
	digits := true
	for _, c := range []byte(table) {
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '$':
			digits = false
		default:
			return fmt.Errorf("%w: %q (only letters, digits, '_' and '$')", ErrInvalidTable, table)
		}
	}
	if digits {
		return fmt.Errorf("%w: %q (all digits)", ErrInvalidTable, table)
	}
	return nil
}
