// Package migrations creates and upgrades the tables redfence keeps in MySQL
// or MariaDB: today the fence table used by package fence.
//
// The schema is a series of golang-migrate files, NNNN_title.up.sql and
// NNNN_title.down.sql, each holding one statement so that a DSN without
// multiStatements works. They are embedded in the binary ([Files]) and
// applied by [Apply], which records the schema version in a table of its own,
// [MigrationsTable], so that it never collides with the application's own
// golang-migrate history.
//
// The same files work with the migrate command-line tool. From a checkout of
// this module, or after copying the directory into your project:
//
//	migrate -source file://migrations \
//	  -database 'mysql://user:pass@tcp(127.0.0.1:3306)/app?x-migrations-table=redfence_schema_migrations' up
//
// Keep x-migrations-table as shown: the tool and [Apply] then share one
// version history, and either may run first.
package migrations
