package migrations_test

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
)

// An application's own schema applied with ApplyFS keeps its history in its
// own table, beside redfence's, and neither disturbs the other.
func TestApplyFSKeepsHistoriesApart(t *testing.T) {
	db := testenv.MySQL(t).DB
	ctx := ctxT(t)
	app := fstest.MapFS{
		"0001_items.up.sql":   {Data: []byte("CREATE TABLE items (id INT PRIMARY KEY)")},
		"0001_items.down.sql": {Data: []byte("DROP TABLE items")},
		"0002_stock.up.sql":   {Data: []byte("ALTER TABLE items ADD COLUMN stock INT NOT NULL DEFAULT 0")},
		"0002_stock.down.sql": {Data: []byte("ALTER TABLE items DROP COLUMN stock")},
	}
	for range 2 { // the second round must change nothing
		if err := migrations.Apply(ctx, db); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if err := migrations.ApplyFS(ctx, db, app, "app_schema_migrations"); err != nil {
			t.Fatalf("ApplyFS: %v", err)
		}
	}
	var appVersion int64
	if err := db.QueryRow("SELECT version FROM app_schema_migrations").Scan(&appVersion); err != nil || appVersion != 2 {
		t.Fatalf("application history: version %d, %v; want 2", appVersion, err)
	}
	if v, dirty := version(t, db); v != latest(t) || dirty {
		t.Fatalf("redfence history: version %d dirty=%v, want %d clean", v, dirty, latest(t))
	}
	if _, err := db.Exec("INSERT INTO items (id, stock) VALUES (1, 5)"); err != nil {
		t.Fatalf("application schema not applied: %v", err)
	}
}

func TestApplyFSRejectsBadInput(t *testing.T) {
	db := testenv.MySQL(t).DB
	ctx := ctxT(t)
	if err := migrations.ApplyFS(ctx, nil, fstest.MapFS{}, "t"); err == nil {
		t.Error("nil db accepted")
	}
	if err := migrations.ApplyFS(ctx, db, nil, "t"); err == nil {
		t.Error("nil file system accepted")
	}
	if err := migrations.ApplyFS(ctx, db, fstest.MapFS{}, ""); err == nil {
		t.Error("empty table name accepted")
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&n); err != nil || n != 0 {
		t.Fatalf("bad input created %d table(s) (%v)", n, err)
	}
}

// A history table name is spliced into SQL, so anything but a plain
// identifier is refused before the database is touched.
func TestApplyFSRejectsBadTableNames(t *testing.T) {
	db := testenv.MySQL(t).DB
	app := fstest.MapFS{
		"0001_t.up.sql":   {Data: []byte("CREATE TABLE should_not_exist (id INT PRIMARY KEY)")},
		"0001_t.down.sql": {Data: []byte("DROP TABLE should_not_exist")},
	}
	for _, name := range []string{"", "a`b", "app migrations", "x;DROP TABLE y", "12345", "app-migrations", strings.Repeat("t", 65), "ünï"} {
		err := migrations.ApplyFS(ctxT(t), db, app, name)
		if !errors.Is(err, migrations.ErrInvalidTable) {
			t.Errorf("ApplyFS(table %q) = %v, want ErrInvalidTable", name, err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d tables created by refused calls, want 0", n)
	}
	if err := migrations.ApplyFS(ctxT(t), db, app, "app_$migrations_2"); err != nil {
		t.Fatalf("valid identifier refused: %v", err)
	}
}
