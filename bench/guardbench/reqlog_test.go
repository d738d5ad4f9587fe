package main

import (
	"strings"
	"testing"
)

// mysqlPacket frames a command as the driver writes it: length, sequence,
// command byte, payload.
func mysqlPacket(cmd byte, payload string) []byte {
	n := len(payload) + 1
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0, cmd}, payload...)
}

func TestRequestLabels(t *testing.T) {
	for _, c := range []struct {
		p    []byte
		want string
	}{
		{mysqlPacket(0x03, "START TRANSACTION"), "START TRANSACTION"},
		{mysqlPacket(0x03, "CALL redfence_begin_claim('sp', X'00')"), "CALL redfence_begin_claim"},
		{mysqlPacket(0x03, "BEGIN NOT ATOMIC\n  CALL redfence_begin_claim('sp', X'00'); END"), "BEGIN NOT ATOMIC"},
		{mysqlPacket(0x03, "  update counters SET n = n + 1"), "UPDATE"},
		{mysqlPacket(0x03, "COMMIT"), "COMMIT"},
		{mysqlPacket(0x03, ""), "(empty query)"},
		{mysqlPacket(0x17, "\x01\x00\x00\x00"), "(execute)"},
		{mysqlPacket(0x02, "db"), "(command 0x02)"},
		{[]byte{1, 0}, "?"},
	} {
		if got := mysqlLabel(c.p); got != c.want {
			t.Errorf("mysqlLabel(%q) = %q, want %q", c.p, got, c.want)
		}
	}
	for _, c := range []struct{ p, want string }{
		{"*1\r\n$4\r\nping\r\n", "PING"},
		{"*5\r\n$7\r\nEVALSHA\r\n$40\r\nabc\r\n", "EVALSHA"},
		{"*1\r\n", "?"},
	} {
		if got := redisLabel([]byte(c.p)); got != c.want {
			t.Errorf("redisLabel(%q) = %q, want %q", c.p, got, c.want)
		}
	}
}

func TestMeterTimesEachRequestWhileALogIsSet(t *testing.T) {
	m := &meter{label: redisLabel}
	c := echoPair(t, m)
	send := func(p string) {
		t.Helper()
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		readN(t, c, len(p))
	}
	send("*1\r\n$4\r\nPING\r\n") // before the log: not timed

	var l reqLog
	m.timeRequests(&l)
	send("*1\r\n$4\r\nPING\r\n")
	send("*2\r\n$3\r\nGET\r\n")
	send("*1\r\n$4\r\nPING\r\n")
	m.timeRequests(nil)
	send("*1\r\n$4\r\nPING\r\n") // after: not timed

	if l.kinds["PING"] == nil || l.kinds["PING"].n != 2 || l.kinds["GET"] == nil || l.kinds["GET"].n != 1 || len(l.kinds) != 2 {
		t.Fatalf("timed %v, want PING twice and GET once", l.kinds)
	}
	if l.kinds["PING"].sum <= 0 {
		t.Fatal("a timed request took no time")
	}
	s := l.summary(2)
	if !strings.Contains(s, "PING 1.00 × ") || !strings.Contains(s, "GET 0.50 × ") {
		t.Fatalf("summary for 2 ops: %q, want PING once and GET half a time per op", s)
	}
	if got := (&reqLog{}).summary(0); got != "none" {
		t.Fatalf("summary of nothing: %q", got)
	}
}
