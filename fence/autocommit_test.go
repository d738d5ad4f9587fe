package fence_test

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/fence"
)

// A DSN with autocommit=0 makes every statement sent to the pool the start of
// a transaction left open on its pooled connection. Ensure must still commit
// the row it creates, and Lookup must still read the latest committed claim
// instead of an old snapshot.
func TestEnsureAndLookupWithAutocommitOff(t *testing.T) {
	_, dsn := newDBWithDSN(t)
	off := openWith(t, dsn, func(c *mysql.Config) {
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params["autocommit"] = "0"
	})
	off.SetMaxOpenConns(1) // every statement below reuses one pooled connection
	on := openWith(t, dsn, func(*mysql.Config) {})
	const res = "autocommit-off"

	if err := fence.Ensure(ctxT(t), off, res); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	// Seen from another pool, the row exists and is not locked: a claim there
	// does not wait for the autocommit=0 connection.
	f := lookup(t, on, res)
	if f.Token != 0 {
		t.Fatalf("row ensured through autocommit=0 pool: token %d, want 0", f.Token)
	}
	if err := claimCommitted(t, on, res, 5, "a"); err != nil {
		t.Fatalf("claim after Ensure through autocommit=0: %v", err)
	}

	// The first Lookup through the autocommit=0 pool would pin a snapshot on
	// its connection; later commits must still be seen.
	if got := lookup(t, off, res); got.Token != 5 || got.Claims != 1 {
		t.Fatalf("Lookup through autocommit=0 pool: token %d claims %d, want 5 and 1", got.Token, got.Claims)
	}
	if err := claimCommitted(t, on, res, 7, "b"); err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, off, res); got.Token != 7 || got.Claims != 2 {
		t.Fatalf("second Lookup through autocommit=0 pool: token %d claims %d, want 7 and 2 (stale snapshot?)", got.Token, got.Claims)
	}
}
