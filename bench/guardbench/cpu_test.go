package main

import (
	"net"
	"os"
	"strconv"
	"testing"
)

func TestListenerFindsTheProcessServingAPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if got, want := listener(addr), strconv.Itoa(os.Getpid()); got != want {
		t.Fatalf("listener(%s) = %q, want this process, %s", addr, got, want)
	}
	// A client connected to the port is not its server.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	_ = ln.Close()
	if got := listener(addr); got != "" {
		t.Fatalf("listener(%s) after the listener closed = %q, want none", addr, got)
	}
	if got := listener("not an address"); got != "" {
		t.Fatalf("listener of a bad address = %q, want none", got)
	}
}
