package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
)

func TestLatestIsTheNewestFile(t *testing.T) {
	if got := migrations.Latest(); got == 0 || int(got) != latest(t) {
		t.Fatalf("Latest() = %d, want %d", got, latest(t))
	}
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func wantVersion(t *testing.T, db *sql.DB, want uint, wantDirty bool) {
	t.Helper()
	v, dirty, err := migrations.Version(ctxT(t), db)
	if err != nil || v != want || dirty != wantDirty {
		t.Fatalf("Version = %d dirty=%v (%v), want %d dirty=%v", v, dirty, err, want, wantDirty)
	}
}

// Version follows Apply and Down: 0 on a fresh database (without creating the
// history table), the newest version after Apply, 0 again after Down, which
// drops the fence table; Down on version 0 and a second Apply are fine.
func TestVersionFollowsApplyAndDown(t *testing.T) {
	db := testenv.MySQL(t).DB
	ctx := ctxT(t)
	wantVersion(t, db, 0, false)
	if tableExists(t, db, migrations.MigrationsTable) {
		t.Fatal("Version created the history table")
	}
	if err := migrations.Down(ctx, db); err != nil {
		t.Fatalf("Down on a fresh database: %v", err)
	}
	if tableExists(t, db, migrations.MigrationsTable) {
		t.Fatal("Down on a fresh database created the history table")
	}
	if err := migrations.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	wantVersion(t, db, migrations.Latest(), false)
	if err := migrations.Down(ctx, db); err != nil {
		t.Fatalf("Down: %v", err)
	}
	wantVersion(t, db, 0, false)
	if tableExists(t, db, "redfence_fences") {
		t.Fatal("fence table still there after Down")
	}
	if err := migrations.Down(ctx, db); err != nil {
		t.Fatalf("second Down: %v", err)
	}
	if err := migrations.Apply(ctx, db); err != nil {
		t.Fatalf("Apply after Down: %v", err)
	}
	wantVersion(t, db, migrations.Latest(), false)
	if !tableExists(t, db, "redfence_fences") {
		t.Fatal("fence table missing after Apply")
	}
}

// A dirty schema is reported by Version and refused by Down, which leaves the
// fence table in place.
func TestDownRefusesDirtySchema(t *testing.T) {
	db := testenv.MySQL(t).DB
	ctx := ctxT(t)
	if err := migrations.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE " + migrations.MigrationsTable + " SET dirty = 1"); err != nil {
		t.Fatal(err)
	}
	wantVersion(t, db, migrations.Latest(), true)
	if err := migrations.Down(ctx, db); !errors.Is(err, migrations.ErrDirty) {
		t.Fatalf("Down on a dirty schema: %v, want ErrDirty", err)
	}
	if !tableExists(t, db, "redfence_fences") {
		t.Fatal("Down on a dirty schema dropped the fence table")
	}
}

func TestVersionAndDownWithoutDatabase(t *testing.T) {
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := migrations.Version(ctxT(t), db); !errors.Is(err, migrations.ErrNoDatabase) {
		t.Errorf("Version without a database: %v", err)
	}
	if err := migrations.Down(ctxT(t), db); !errors.Is(err, migrations.ErrNoDatabase) {
		t.Errorf("Down without a database: %v", err)
	}
	if _, _, err := migrations.Version(ctxT(t), nil); err == nil {
		t.Error("Version(nil) succeeded")
	}
	if err := migrations.Down(ctxT(t), nil); err == nil {
		t.Error("Down(nil) succeeded")
	}
}

func TestDownCanceled(t *testing.T) {
	db := testenv.MySQL(t).DB
	if err := migrations.Apply(ctxT(t), db); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := migrations.Down(ctx, db); !errors.Is(err, context.Canceled) {
		t.Fatalf("Down with a cancelled ctx: %v", err)
	}
	if !tableExists(t, db, "redfence_fences") {
		t.Fatal("a cancelled Down dropped the fence table")
	}
}
