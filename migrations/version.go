package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/golang-migrate/migrate/v4"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Latest returns the newest version among the embedded migration files: the
// version [Apply] brings the schema to.
func Latest() uint {
	src, err := iofs.New(files, ".")
	if err != nil {
		return 0 // no files embedded; TestLatestIsTheNewestFile rules it out
	}
	defer src.Close()
	v, err := src.First()
	for err == nil {
		var next uint
		if next, err = src.Next(v); err == nil {
			v = next
		}
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, os.ErrNotExist) {
		return 0
	}
	return v
}

// Version reports the version of redfence's schema recorded in
// [MigrationsTable] of the database selected by db, and whether a migration
// to it failed part-way (dirty; see [ErrDirty]). A database where nothing was
// applied, or everything was reverted by [Down], is at version 0. Version
// only reads: it creates no history table. ctx bounds the queries. A DSN
// without a database gives [ErrNoDatabase].
func Version(ctx context.Context, db *sql.DB) (version uint, dirty bool, err error) {
	if db == nil {
		return 0, false, errors.New("migrations: nil *sql.DB")
	}
	// An explicit transaction reads committed data whatever the DSN's
	// autocommit setting.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return 0, false, fmt.Errorf("migrations: version: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var schema sql.NullString
	if err := tx.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&schema); err != nil {
		return 0, false, fmt.Errorf("migrations: version: %w", err)
	}
	if !schema.Valid {
		return 0, false, ErrNoDatabase
	}
	var n int
	err = tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		schema.String, MigrationsTable).Scan(&n)
	if err != nil {
		return 0, false, fmt.Errorf("migrations: version: %w", err)
	}
	if n == 0 {
		return 0, false, nil
	}
	// golang-migrate keeps one row; a reverted history keeps none, or -1
	// when reverting the first version failed.
	var v int64
	err = tx.QueryRowContext(ctx, "SELECT version, dirty FROM "+MigrationsTable+" LIMIT 1").Scan(&v, &dirty)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("migrations: version: %w", err)
	}
	return uint(max(v, 0)), dirty, nil
}

// Down reverts every redfence migration, newest first, as the migrate
// tool's "down -all" does: it drops the fence table and every fence row with
// it. Only run it when no Guard uses the database any more: without fence
// rows, a holder that lost its lock is no longer stopped. On a database at
// version 0 it changes nothing and returns nil. Concurrent Apply and Down
// calls are serialised as for [Apply].
//
// ctx governs the wait for a connection and the stop between two migration
// files. A dirty schema gives an error matching [ErrDirty]; a DSN without a
// database gives [ErrNoDatabase].
func Down(ctx context.Context, db *sql.DB) error {
	v, dirty, err := Version(ctx, db)
	if err != nil {
		return err
	}
	if v == 0 && !dirty {
		return nil
	}
	return run(ctx, db, files, MigrationsTable, (*migrate.Migrate).Down)
}

// run prepares golang-migrate on a connection of db's own and runs step
// (Up or Down), stopping between files when ctx ends.
func run(ctx context.Context, db *sql.DB, fsys fs.FS, table string, step func(*migrate.Migrate) error) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: connect: %w", err)
	}
	// Closing the driver closes conn, not the caller's pool.
	drv, err := migratemysql.WithConnection(ctx, conn, &migratemysql.Config{MigrationsTable: table})
	if err != nil {
		_ = conn.Close()
		if errors.Is(err, migratemysql.ErrNoDatabaseName) {
			return ErrNoDatabase
		}
		return fmt.Errorf("migrations: prepare %s: %w", table, err)
	}
	src, err := iofs.New(fsys, ".")
	if err != nil {
		_ = drv.Close()
		return fmt.Errorf("migrations: read migration files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
	if err != nil {
		_ = src.Close()
		_ = drv.Close()
		return fmt.Errorf("migrations: %w", err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			if cerr := errors.Join(srcErr, dbErr); cerr != nil {
				err = fmt.Errorf("migrations: close: %w", cerr)
			}
		}
	}()

	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			m.GracefulStop <- true
		case <-stop:
		}
	}()
	err = step(m)
	close(stop)
	<-watched

	var d migrate.ErrDirty
	switch {
	case err == nil, errors.Is(err, migrate.ErrNoChange):
		return ctx.Err()
	case errors.As(err, &d):
		return fmt.Errorf("%w at version %d: a migration failed part-way; repair the schema by hand, "+
			"then record the version it is at with the migrate tool's force command "+
			"(x-migrations-table=%s)", ErrDirty, d.Version, table)
	case ctx.Err() != nil:
		return errors.Join(fmt.Errorf("migrations: %w", err), ctx.Err())
	default:
		return fmt.Errorf("migrations: %w", err)
	}
}
