package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/redfence/redfence/migrations"
)

// MigrationsTable records the version of the inventory schema, apart from
// redfence's own history (migrations.MigrationsTable).
const MigrationsTable = "inventory_schema_migrations"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate creates or upgrades everything the service needs in the database
// selected by db: redfence's fence table, then the inventory and orders
// tables. It is idempotent.
func Migrate(ctx context.Context, db *sql.DB) error {
	if err := migrations.Apply(ctx, db); err != nil {
		return err
	}
	own, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if err := migrations.ApplyFS(ctx, db, own, MigrationsTable); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	return nil
}
