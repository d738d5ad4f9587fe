package main

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoPair returns a metered client connection to a loopback server that
// echoes what it reads.
func echoPair(t *testing.T, m *meter) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	conn, err := m.dial(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		<-served
	})
	return conn
}

func readN(t *testing.T, c net.Conn, n int) {
	t.Helper()
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
}

func TestMeterHoldsBackEachRequestOnceAndCountsItsRoundTrip(t *testing.T) {
	var slept []time.Duration
	m := &meter{delay: time.Millisecond, sleep: func(d time.Duration) { slept = append(slept, d) }}
	c := echoPair(t, m)

	// One request written in two pieces, as a pipeline or a long statement
	// is: one delay, one round trip.
	for _, p := range []string{"GET ", "a\n"} {
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	readN(t, c, 6)
	if len(slept) != 1 || slept[0] != time.Millisecond {
		t.Fatalf("first request held back %v, want once by 1ms", slept)
	}
	if got := m.roundTrips(); got != 1 {
		t.Fatalf("round trips after the first request: %d, want 1", got)
	}

	// The next request is held back again.
	if _, err := c.Write([]byte("PING\n")); err != nil {
		t.Fatal(err)
	}
	readN(t, c, 5)
	if len(slept) != 2 || m.roundTrips() != 2 {
		t.Fatalf("after the second request: held back %d times, %d round trips; want 2 and 2", len(slept), m.roundTrips())
	}
}

func TestMeterWithoutDelayOnlyCounts(t *testing.T) {
	m := &meter{sleep: func(time.Duration) { t.Error("held back a request with no delay set") }}
	c := echoPair(t, m)
	for range 3 {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		readN(t, c, 1)
	}
	if got := m.roundTrips(); got != 3 {
		t.Fatalf("round trips: %d, want 3", got)
	}
}

func TestMeteredConnKeepsTheSocketForLivenessChecks(t *testing.T) {
	c := echoPair(t, &meter{})
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatal("a metered connection does not give the drivers its socket: their idle-connection checks would be skipped")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd uintptr
	if err := raw.Control(func(f uintptr) { fd = f }); err != nil || fd == 0 {
		t.Fatalf("socket not reachable: fd %d, %v", fd, err)
	}
}
