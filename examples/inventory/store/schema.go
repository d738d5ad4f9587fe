package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"

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
	// A connection of its own: closing the migrate instance closes the driver,
	// which must not close the caller's pool.
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: connect: %w", err)
	}
	drv, err := migratemysql.WithConnection(ctx, conn, &migratemysql.Config{MigrationsTable: MigrationsTable})
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	src, err := iofs.New(migrationFiles, "migrations")
	if err != nil {
		_ = drv.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
	if err != nil {
		_ = src.Close()
		_ = drv.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	err = m.Up()
	srcErr, dbErr := m.Close()
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if cerr := errors.Join(srcErr, dbErr); cerr != nil {
		return fmt.Errorf("store: migrate: close: %w", cerr)
	}
	return nil
}
