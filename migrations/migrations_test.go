package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func version(t *testing.T, db *sql.DB) (v int, dirty bool) {
	t.Helper()
	err := db.QueryRow("SELECT version, dirty FROM "+migrations.MigrationsTable).Scan(&v, &dirty)
	if err != nil {
		t.Fatal(err)
	}
	return v, dirty
}

// latest is the highest version among the embedded files.
func latest(t *testing.T) int {
	t.Helper()
	ups, err := fs.Glob(migrations.Files(), "*.up.sql")
	if err != nil || len(ups) == 0 {
		t.Fatalf("no up migrations embedded: %v", err)
	}
	var v int
	for _, f := range ups {
		n := 0
		for _, c := range f[:4] {
			n = n*10 + int(c-'0')
		}
		v = max(v, n)
	}
	return v
}

// TestApplyIsIdempotent: the first Apply creates the fence table and records
// the newest version in the private table; a second one changes nothing and
// succeeds; the caller's pool is still open afterwards.
func TestApplyIsIdempotent(t *testing.T) {
	db := testenv.MySQL(t).DB
	ctx := ctxT(t)
	if err := migrations.Apply(ctx, db); err != nil {
		t.Fatalf("first Apply: %v", err)
	}
	if _, err := db.Exec("INSERT INTO redfence_fences (resource, token) VALUES ('r', 7)"); err != nil {
		t.Fatalf("fence table after Apply: %v", err)
	}
	if v, dirty := version(t, db); v != latest(t) || dirty {
		t.Fatalf("version %d dirty=%v, want %d clean", v, dirty, latest(t))
	}
	if err := migrations.Apply(ctx, db); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	var token uint64
	if err := db.QueryRow("SELECT token FROM redfence_fences WHERE resource = 'r'").Scan(&token); err != nil || token != 7 {
		t.Fatalf("second Apply touched the data: token %d, %v", token, err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'schema_migrations'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("golang-migrate's default table was created (%d, %v): the private name was not used", n, err)
	}
}

// TestApplyConcurrent: several processes starting at once all succeed and
// the schema ends up applied once.
func TestApplyConcurrent(t *testing.T) {
	_, dsn := testenv.MySQLWithDSN(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			errs <- migrations.Apply(ctx, db)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Apply: %v", err)
		}
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, dirty := version(t, db); v != latest(t) || dirty {
		t.Fatalf("version %d dirty=%v after concurrent Apply", v, dirty)
	}
}

// TestApplyDirty: a schema marked dirty by an interrupted migration stops
// Apply with ErrDirty and a message naming the version.
func TestApplyDirty(t *testing.T) {
	db := testenv.MySQL(t).DB
	ctx := ctxT(t)
	if err := migrations.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE " + migrations.MigrationsTable + " SET dirty = 1"); err != nil {
		t.Fatal(err)
	}
	err := migrations.Apply(ctx, db)
	if !errors.Is(err, migrations.ErrDirty) || !strings.Contains(err.Error(), fmt.Sprintf("version %d", latest(t))) {
		t.Fatalf("Apply on a dirty schema: %v", err)
	}
}

func TestApplyWithoutDatabase(t *testing.T) {
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
	if err := migrations.Apply(ctxT(t), db); !errors.Is(err, migrations.ErrNoDatabase) {
		t.Fatalf("Apply without a database: %v", err)
	}
	if err := migrations.Apply(ctxT(t), nil); err == nil {
		t.Fatal("Apply(nil) succeeded")
	}
}

func TestApplyCanceled(t *testing.T) {
	db := testenv.MySQL(t).DB
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := migrations.Apply(ctx, db); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled ctx: %v", err)
	}
}

// TestDownReversesUp runs every down file after the up files, as the
// migrate tool would, and checks the fence table is gone.
func TestDownReversesUp(t *testing.T) {
	db := testenv.MySQL(t).DB
	if err := migrations.Apply(ctxT(t), db); err != nil {
		t.Fatal(err)
	}
	downs, _ := fs.Glob(migrations.Files(), "*.down.sql")
	for i := len(downs) - 1; i >= 0; i-- {
		b, err := fs.ReadFile(migrations.Files(), downs[i])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", downs[i], err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'redfence_fences'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("fence table after the down migrations: %d, %v", n, err)
	}
}

var fileName = regexp.MustCompile(`^\d{4}_[a-z0-9_]+\.(up|down)\.sql$`)

// TestFilesArePairsOfSingleStatements: every file is named NNNN_title,
// comes with its opposite, and holds one statement (no semicolon outside
// comments), so a DSN without multiStatements works.
func TestFilesArePairsOfSingleStatements(t *testing.T) {
	entries, err := fs.ReadDir(migrations.Files(), ".")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	for name := range names {
		if !fileName.MatchString(name) {
			t.Errorf("%s: not NNNN_title.up.sql / .down.sql", name)
			continue
		}
		other := strings.Replace(name, ".up.", ".down.", 1)
		if strings.Contains(name, ".down.") {
			other = strings.Replace(name, ".down.", ".up.", 1)
		}
		if !names[other] {
			t.Errorf("%s has no %s", name, other)
		}
		b, _ := fs.ReadFile(migrations.Files(), name)
		var code []string
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") {
				code = append(code, line)
			}
		}
		stmt := strings.TrimSpace(strings.TrimRight(strings.Join(code, "\n"), " \n;"))
		if strings.HasPrefix(stmt, "CREATE PROCEDURE ") && strings.HasSuffix(stmt, "\nEND") {
			// A compound statement: the semicolons inside its BEGIN ... END
			// end the statements of its body, not the file's statement.
			stmt = stmt[:strings.Index(stmt, "\nBEGIN\n")]
		}
		if strings.Contains(stmt, ";") {
			t.Errorf("%s holds more than one statement", name)
		}
	}
}

// TestBeginClaimRunsWithTheCallersPrivileges: redfence_begin_claim runs the
// statement it is given, so it must run it with the privileges of whoever
// calls it: a user allowed to execute the procedure but not to update the
// fence table is refused the update, however the procedure was created.
func TestBeginClaimRunsWithTheCallersPrivileges(t *testing.T) {
	db, dsn := testenv.MySQLWithDSN(t)
	ctx := ctxT(t)
	if err := migrations.Apply(ctx, db.DB); err != nil {
		t.Fatal(err)
	}
	testenv.MustExec(t, db, "INSERT INTO redfence_fences (resource, token) VALUES ('r', 7)")
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	user := fmt.Sprintf("rf_invoker_%d", time.Now().UnixNano()%1e9)
	testenv.MustExec(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() { _, _ = db.Exec("DROP USER '" + user + "'@'%'") })
	testenv.MustExec(t, db, "GRANT EXECUTE ON PROCEDURE `"+cfg.DBName+"`.redfence_begin_claim TO '"+user+"'@'%'")
	testenv.MustExec(t, db, "GRANT SELECT ON `"+cfg.DBName+"`.redfence_fences TO '"+user+"'@'%'")

	cfg.User, cfg.Passwd = user, "pw"
	limited, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	tx, err := limited.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var conn, id uint64
	err = tx.QueryRowContext(ctx, "CALL redfence_begin_claim('sp', 'UPDATE redfence_fences SET token = LAST_INSERT_ID(99)')").Scan(&conn, &id)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1142 {
		t.Fatalf("update through the procedure by a user without UPDATE: %v, want error 1142 (command denied)", err)
	}
	var token uint64
	if err := db.QueryRow("SELECT token FROM redfence_fences WHERE resource = 'r'").Scan(&token); err != nil || token != 7 {
		t.Fatalf("token %d (%v), want 7 unchanged", token, err)
	}
}
