package fence_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql keeps one opener goroutine per pool until Close, and
		// the driver's connection checker may still be winding down.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// newDB returns a private database with the fence table created.
func newDB(t testing.TB) *sqlx.DB {
	t.Helper()
	db := testenv.MySQL(t)
	if err := applyMigrations(db); err != nil {
		t.Fatalf("migrations.Apply: %v", err)
	}
	return db
}

func applyMigrations(db *sqlx.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return migrations.Apply(ctx, db.DB)
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
