package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redfence/redfence/migrations"
)

// migrateJSON is the output of migrate -json. Its field names are stable.
type migrateJSON struct {
	Action   string `json:"action"` // up, down or version
	Database string `json:"database"`
	Table    string `json:"migrations_table"`
	Previous *uint  `json:"previous_version,omitempty"` // before up or down
	Version  uint   `json:"version"`                    // 0: no redfence schema
	Dirty    bool   `json:"dirty"`
	Latest   uint   `json:"latest"` // the version up brings the schema to
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) (jsonOut bool, err error) {
	var c config
	fs := newFlagSet("migrate", "migrate [flags] up|down|version", &c, stderr)
	yes := fs.Bool("yes", false, "confirm migrate down, which drops the fence table and every fence row")
	pos, err := parse(fs, &c, args)
	if err != nil {
		return c.json, err
	}
	if len(pos) != 1 {
		return c.json, usageErrorf("migrate takes one of up, down, version; got %d arguments", len(pos))
	}
	action := pos[0]
	switch action {
	case "up", "version":
	case "down":
		if !*yes {
			return c.json, usageErrorf("migrate down drops the fence table and every fence row in it, which " +
				"leaves holders that lost their lock unfenced; stop every Guard using the database, then pass -yes")
		}
	default:
		return c.json, usageErrorf("unknown migrate action %q (want up, down or version)", action)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	db, cfg, err := openMySQL(ctx, &c)
	if err != nil {
		return c.json, err
	}
	defer db.Close()

	out := migrateJSON{Action: action, Database: cfg.DBName, Table: migrations.MigrationsTable, Latest: migrations.Latest()}
	before, _, err := migrations.Version(ctx, db.DB)
	if err != nil {
		return c.json, err
	}
	switch action {
	case "up":
		err = migrations.Apply(ctx, db.DB)
	case "down":
		err = migrations.Down(ctx, db.DB)
	}
	if err != nil {
		return c.json, err
	}
	if out.Version, out.Dirty, err = migrations.Version(ctx, db.DB); err != nil {
		return c.json, err
	}
	if action != "version" {
		out.Previous = &before
	}
	if c.json {
		writeJSON(stdout, out)
		return c.json, nil
	}
	state := "clean"
	if out.Dirty {
		state = "DIRTY: a migration failed part-way; repair by hand, then record the version with the migrate tool's force command"
	}
	switch {
	case out.Previous != nil && *out.Previous == out.Version:
		fmt.Fprintf(stdout, "database %s: schema already at version %d (%s); nothing to do\n", out.Database, out.Version, state)
	case out.Previous != nil:
		fmt.Fprintf(stdout, "database %s: schema version %d -> %d (%s)\n", out.Database, *out.Previous, out.Version, state)
	case out.Version == 0:
		fmt.Fprintf(stdout, "database %s: no redfence schema (version 0; latest %d)\n", out.Database, out.Latest)
	default:
		fmt.Fprintf(stdout, "database %s: schema version %d, %s (latest %d)\n", out.Database, out.Version, state, out.Latest)
	}
	return c.json, nil
}
