package devserver

import (
	"fmt"
	"net"
)

// FreePort returns a loopback TCP port that was free a moment ago. Another
// program may take it before the caller does; the Start functions retry on a
// new port when their server cannot bind.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devserver: no free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
