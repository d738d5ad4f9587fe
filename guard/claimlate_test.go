package guard_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/redfence/redfence/guard"
)

// lagConn delivers writes to the server through a queue; once a claim
// packet (the CALL around it, or the bare UPDATE) is queued, it and
// everything after it (including the close) reach the server lag later.
// delivered is closed once the claim has been written.
type lagConn struct {
	net.Conn
	lag       time.Duration
	delivered chan struct{}
	mu        sync.Mutex
	q         chan func()
	once      sync.Once
	armed     bool
}

func newLagConn(c net.Conn, lag time.Duration, delivered chan struct{}) *lagConn {
	l := &lagConn{Conn: c, lag: lag, delivered: delivered, q: make(chan func(), 64)}
	go func() {
		for f := range l.q {
			f()
		}
	}()
	return l
}

func (l *lagConn) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(p) >= 5 && p[4] == 3 {
		q := string(p[5:])
		if strings.HasPrefix(q, "CALL redfence_begin_claim(") || strings.HasPrefix(q, "UPDATE redfence_fences SET") {
			l.armed = true
			b := append([]byte(nil), p...)
			l.q <- func() {
				time.Sleep(l.lag)
				_, _ = l.Conn.Write(b)
				close(l.delivered)
			}
			return len(p), nil
		}
	}
	if l.armed {
		b := append([]byte(nil), p...)
		l.q <- func() { _, _ = l.Conn.Write(b) }
		return len(p), nil
	}
	return l.Conn.Write(p)
}

func (l *lagConn) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.armed {
		l.once.Do(func() { l.q <- func() { _ = l.Conn.Close() }; close(l.q) })
		return nil
	}
	l.once.Do(func() { close(l.q) })
	return l.Conn.Close()
}

// A claim that reaches the server only after its caller gave up (its
// packet held back 150 ms, the caller's ctx ending after 100 ms) is ended
// there too: it does not wait for the fence row, holding a connection slot
// and the row's queue place, until innodb_lock_wait_timeout.
func TestALateClaimOfACallerThatGaveUpIsEnded(t *testing.T) {
	delivered := make(chan struct{})
	var once sync.Once
	e := newEnv(t, envConfig{guard: &guard.Options{MaxAttempts: 1, NoRelay: true},
		dial: func(c net.Conn) net.Conn {
			d := make(chan struct{})
			once.Do(func() { d = delivered })
			return newLagConn(c, 150*time.Millisecond, d)
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain := sqlx.MustOpen("mysql", e.dsn)
	defer plain.Close()
	g2 := guard.New(e.locker, plain, nil) // makes the fence row
	must(t, g2.Do(ctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil }))
	holder, err := plain.BeginTxx(ctx, nil)
	must(t, err)
	defer holder.Rollback()
	var tok uint64
	must(t, holder.QueryRowContext(ctx, "SELECT token FROM redfence_fences FOR UPDATE").Scan(&tok))

	dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer dcancel()
	if err := e.g.Do(dctx, "k", func(ctx context.Context, tx *guard.Tx) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want the deadline", err)
	}
	<-delivered
	var waiting []string
	for deadline := time.Now().Add(time.Second); ; {
		waiting = waiting[:0]
		must(t, plain.SelectContext(ctx, &waiting, "SELECT CONCAT(ID, ' ', LEFT(INFO, 40)) FROM information_schema.PROCESSLIST"+
			" WHERE INFO LIKE 'UPDATE redfence_fences%' OR INFO LIKE 'CALL redfence_begin_claim%'"))
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim of a caller that gave up still waits on the server 1s after it arrived: %v", waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
