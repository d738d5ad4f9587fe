package main

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// meter counts round trips on the sockets it dials and, to model servers on
// other hosts, holds back every request written on them by delay.
//
// A request is what a client writes between two reads; it is held back once,
// before its first write, so a pipeline or a request split over several
// writes costs one delay, as it would cost one network crossing. The reply
// is not delayed: a round trip costs delay once, and so does a hand-off that
// travels from one client through the server to another (the unlock request
// is held back; the message the server pushes to the waiter is not).
type meter struct {
	delay time.Duration
	sleep func(time.Duration) // holds a request back; nil: time.Sleep
	label func([]byte) string // names a request from its first write; nil: not timed
	rt    atomic.Int64
	reqs  atomic.Pointer[reqLog] // while set, every request is timed into it
}

// timeRequests starts timing every request into a new log, or stops (nil).
func (m *meter) timeRequests(l *reqLog) { m.reqs.Store(l) }

// roundTrips is the number of round trips counted so far.
func (m *meter) roundTrips() int64 { return m.rt.Load() }

// dial dials addr and meters the connection.
func (m *meter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return m.wrap(conn), nil
}

func (m *meter) wrap(conn net.Conn) net.Conn { return &meteredConn{Conn: conn, m: m} }

// meteredConn counts a round trip when a read follows a write, and holds
// back the first write of each request.
type meteredConn struct {
	net.Conn
	m       *meter
	wrote   atomic.Bool
	pending atomic.Pointer[request] // the request being timed
}

// request is a request on its way: its name and when it was written.
type request struct {
	label string
	sent  time.Time
	log   *reqLog
}

func (c *meteredConn) Write(p []byte) (int, error) {
	if !c.wrote.Swap(true) {
		if c.m.delay > 0 {
			if c.m.sleep != nil {
				c.m.sleep(c.m.delay)
			} else {
				time.Sleep(c.m.delay)
			}
		}
		if l := c.m.reqs.Load(); l != nil && c.m.label != nil {
			c.pending.Store(&request{label: c.m.label(p), sent: time.Now(), log: l})
		}
	}
	return c.Conn.Write(p)
}

func (c *meteredConn) Read(p []byte) (int, error) {
	if !c.wrote.Swap(false) {
		return c.Conn.Read(p)
	}
	c.m.rt.Add(1)
	n, err := c.Conn.Read(p)
	if r := c.pending.Swap(nil); r != nil && err == nil {
		r.log.add(r.label, time.Since(r.sent))
	}
	return n, err
}

// SyscallConn gives the drivers the socket itself for their liveness checks
// of idle connections (a non-blocking read), as they have it unwrapped.
func (c *meteredConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
