package main

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
)

// migrate version, up and down on a private database, selected both ways:
// in the DSN and with -database over a DSN that names none. down needs -yes
// and changes nothing without it.
func TestMigrateUpVersionDown(t *testing.T) {
	db, dsn := testenv.MySQLWithDSN(t)
	e := &env{t: t, db: db, dsn: dsn}
	latest := migrations.Latest()
	fenceTable := func() bool {
		var n int
		if err := db.Get(&n, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'redfence_fences'"); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	var v migrateJSON
	decode(t, e.mustRun("migrate", "version", "-json"), &v)
	if v.Action != "version" || v.Version != 0 || v.Dirty || v.Latest != latest || v.Previous != nil || v.Table != migrations.MigrationsTable {
		t.Fatalf("version of an empty database: %+v", v)
	}
	if r := e.mustRun("migrate", "version"); !strings.Contains(r.stdout, "no redfence schema (version 0") {
		t.Fatalf("text version of an empty database: %v", r)
	}

	decode(t, e.mustRun("migrate", "-json", "up"), &v)
	if v.Action != "up" || v.Previous == nil || *v.Previous != 0 || v.Version != latest || v.Dirty || !fenceTable() {
		t.Fatalf("up: %+v (fence table %v)", v, fenceTable())
	}
	if r := e.mustRun("migrate", "up"); !strings.Contains(r.stdout, "nothing to do") {
		t.Fatalf("second up: %v", r)
	}

	// -database selects the database when the DSN names none.
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	dbName := cfg.DBName
	cfg.DBName = ""
	noDB := cfg.FormatDSN()
	r := runCLI(t, "migrate", "version", "-json", "-mysql-dsn", noDB, "-database", dbName)
	decode(t, r, &v)
	if v.Database != dbName || v.Version != latest {
		t.Fatalf("version with -database %s: %+v", dbName, v)
	}

	r = e.run("migrate", "down")
	if r.code != exitUsage || !strings.Contains(r.stderr, "-yes") || !fenceTable() {
		t.Fatalf("down without -yes: %v (fence table %v)", r, fenceTable())
	}
	decode(t, e.mustRun("migrate", "down", "-yes", "-json"), &v)
	if v.Action != "down" || v.Previous == nil || *v.Previous != latest || v.Version != 0 || fenceTable() {
		t.Fatalf("down: %+v (fence table %v)", v, fenceTable())
	}
	if r := e.mustRun("migrate", "version"); !strings.Contains(r.stdout, "version 0") {
		t.Fatalf("version after down: %v", r)
	}
}

// A dirty schema: version reports it (status 0), up refuses (status 1).
func TestMigrateDirty(t *testing.T) {
	e := newEnv(t)
	testenv.MustExec(t, e.db, "UPDATE "+migrations.MigrationsTable+" SET dirty = 1")
	var v migrateJSON
	decode(t, e.mustRun("migrate", "version", "-json"), &v)
	if !v.Dirty || v.Version != migrations.Latest() {
		t.Fatalf("version of a dirty schema: %+v", v)
	}
	if r := e.mustRun("migrate", "version"); !strings.Contains(r.stdout, "DIRTY") {
		t.Fatalf("text version of a dirty schema: %v", r)
	}
	r := e.run("migrate", "up")
	if r.code != exitFailed || !strings.Contains(r.stderr, "dirty") {
		t.Fatalf("up on a dirty schema: %v", r)
	}
}
