package devserver

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// holdEnv, set to redis or mariadb, makes the test binary start that server
// in a directory of its own, print its pid and directory, and wait to be
// killed (see TestKilledProgramLeavesNothingForLong).
const holdEnv = "DEVSERVER_TEST_HOLD"

func TestMain(m *testing.M) {
	if which := os.Getenv(holdEnv); which != "" {
		hold(which)
	}
	goleak.VerifyTestMain(m)
}

func hold(which string) {
	var p *Process
	var err error
	if which == "mariadb" {
		p, err = StartMariaDB(context.Background(), MariaDBOptions{})
	} else {
		p, err = StartRedis(context.Background(), RedisOptions{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d %s\n", p.Pid(), p.Dir)
	select {}
}
