package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// DefaultMySQLDSN is used when MYSQL_DSN is unset: root with an empty password
// on the local server, no database selected.
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/"

// MySQLDSN returns the DSN tests use for the MySQL (or MariaDB) server:
// MYSQL_DSN when set; otherwise DefaultMySQLDSN when something answers on
// 127.0.0.1:3306; otherwise, when a Docker engine is reachable, a MySQL
// container started once for the whole test process with testcontainers-go.
func MySQLDSN() string {
	quietClientLogs()
	return mysqlResolver.get()
}

// MySQL creates a database of the test's own on the MySQL server, returns a
// handle to it (parseTime on) and drops the database when the test ends. It
// fails the test at once, naming MYSQL_DSN, when the server does not answer.
// The server is checked once per test process: when it is down, the first
// test explains and the later ones fail without waiting.
func MySQL(t testing.TB) *sqlx.DB {
	t.Helper()
	db, _ := MySQLWithDSN(t)
	return db
}

// MySQLWithDSN is [MySQL] that also returns the DSN of the new database, for
// tests that open more pools (simulated application instances).
func MySQLWithDSN(t testing.TB) (*sqlx.DB, string) {
	t.Helper()
	base := MySQLDSN()
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("testenv: MYSQL_DSN=%q is not a valid DSN: %v", base, err)
	}
	cfg.ParseTime = true
	if r := reachMySQL(base, cfg); r.err != nil {
		r.fail(t, mysqlDown(cfg.Addr, r.err))
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("testenv: open MySQL: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		t.Fatal(mysqlDown(cfg.Addr, err))
	}
	name := "rftest_" + RandomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return
		}
		defer a.Close()
		if _, err := a.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sqlx.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", name, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, dsn
}

// MustExec runs a statement on db and fails the test on error.
func MustExec(t testing.TB, db *sqlx.DB, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		t.Fatalf("testenv: %s: %v", query, fmt.Sprint(err))
	}
}

// mysqlDown is the one-line failure of a test whose MySQL does not answer.
func mysqlDown(addr string, err error) string {
	return fmt.Sprintf("testenv: MySQL at %s does not answer (%v): start it, or set MYSQL_DSN=user:pass@tcp(host:port)/ "+
		"(docker compose up -d starts one on 127.0.0.1:3306)%s", addr, err, noteSuffix(mysqlResolver))
}
