package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/migrations"
)

// Apply runs at start-up, on the application's own database: it creates the
// fence table the first time and changes nothing afterwards. Here the
// database is a scratch one, created and dropped by the example, on the
// server of MYSQL_DSN (default: root with an empty password on
// 127.0.0.1:3306).
func ExampleApply() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := os.Getenv("MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/?parseTime=true"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		fmt.Println("MYSQL_DSN:", err)
		return
	}
	cfg.DBName = ""
	server, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer server.Close()
	if err := server.PingContext(ctx); err != nil {
		fmt.Println("MySQL does not answer (set MYSQL_DSN=user:pass@tcp(host:port)/):", err)
		return
	}
	name := "redfence_example_" + strings.ToLower(rand.Text())
	if _, err := server.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if _, err := server.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			fmt.Println(err)
		}
	}()

	// Apply needs a DSN that selects the database (ErrNoDatabase otherwise).
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	for range 2 { // the second run finds the schema up to date
		if err := migrations.Apply(ctx, db); err != nil {
			fmt.Println(err)
			return
		}
	}

	var tables int
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables"+
		" WHERE table_schema = DATABASE() AND table_name IN (?, ?)", fence.Table, migrations.MigrationsTable).Scan(&tables)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("tables:", fence.Table, "and", migrations.MigrationsTable, "present:", tables == 2)
	// Output: tables: redfence_fences and redfence_schema_migrations present: true
}
