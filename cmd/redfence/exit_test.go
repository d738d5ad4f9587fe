package main

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/internal/testenv"
)

// The exit statuses are those of the inventory example too: 1 failed, 2 bad
// usage, 3 a server did not answer. Written as numbers, so that a change of
// the constants fails here.
func TestExitStatusConvention(t *testing.T) {
	_, dsn := testenv.MySQLWithDSN(t)
	refused, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	refused.User, refused.Passwd = "rf_nobody_"+testenv.RandomHex(4), "wrong"
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"inspect", "-bogus", "k"}, 2},
		{[]string{"migrate", "version", "-mysql-dsn", "not a dsn"}, 2},
		{[]string{"migrate", "version", "-mysql-dsn", "root@tcp(" + closedAddr(t) + ")/db"}, 3},
		{[]string{"migrate", "version", "-mysql-dsn", refused.FormatDSN()}, 1},
		{[]string{"migrate", "version", "-mysql-dsn", dsn}, 0},
	} {
		if r := runCLI(t, c.args...); r.code != c.want {
			t.Errorf("%q: exit %d, want %d\n%v", c.args, r.code, c.want, r)
		}
	}
}
