package chaos

import (
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.QuietClientLogs()
	code := m.Run()
	if holderDir != "" {
		_ = os.RemoveAll(holderDir)
	}
	if code == 0 {
		if err := goleak.Find(
			// go-redis closes pooled connections in the background after Close.
			goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
			// database/sql's connection opener ends shortly after DB.Close.
			goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
			// toxiproxy (the test proxy, not redfence) restarts each
			// connection's last stub, piping into the new toxic's, when a
			// toxic is added; on a connection that closes at that moment
			// (a killed one), the restarted stub's send can be left without
			// a reader and block for good, after the proxy was stopped.
			goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"),
		); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var (
	holderOnce sync.Once
	holderDir  string
	holderBin  string
	holderErr  error
)

// holder returns the holder binary, built once per test run.
func holder(t testing.TB) string {
	t.Helper()
	holderOnce.Do(func() {
		holderDir, holderErr = os.MkdirTemp("", "chaos-holder-")
		if holderErr == nil {
			holderBin, holderErr = BuildHolder(holderDir)
		}
	})
	if holderErr != nil {
		t.Fatal(holderErr)
	}
	return holderBin
}
