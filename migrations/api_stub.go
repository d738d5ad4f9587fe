package migrations

import (
	"context"
	"database/sql"
)

func Apply(ctx context.Context, db *sql.DB) error { panic("unimplemented") }
