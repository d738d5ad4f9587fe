package guard

// spare.go owns one rule of taking a connection from the pool: a Do does
// not take the pool's last free connection for a key whose transaction
// another Do of this process has open. It decides nothing else about
// connections; relay.go decides which transaction an attempt runs in.
//
// With the lock handed on at the claim, the key's next holder begins its
// transaction and sends its claim while the holder's fn still runs; the
// claim waits for the holder's COMMIT, holding a connection. An fn that
// reads through the pool (outside its transaction) would then wait for the
// connection the next holder holds, while the next holder waits for fn:
// both until innodb_lock_wait_timeout. So when taking a connection would
// leave the pool (sql.DB.SetMaxOpenConns) without a free one, the next
// holder waits in the process, without a connection, until the holder's
// transaction has ended (or, relaying, takes the transaction it passes on).
// Other users of the pool, or fns on other keys, can still take the last
// connections: the rule keeps one free for the holder's fn only as far as
// this process's Do calls go.

import (
	"context"
	"sync"
)

// openTxs counts, per key, the attempts of this process whose transaction
// is open.
type openTxs struct {
	mu   sync.Mutex
	keys map[string]*openTx
}

type openTx struct {
	n     int
	ended chan struct{} // closed when n drops to 0
}

// enter records an open transaction of key; leave, its end.
func (o *openTxs) enter(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys == nil {
		o.keys = make(map[string]*openTx)
	}
	t := o.keys[key]
	if t == nil {
		t = &openTx{ended: make(chan struct{})}
		o.keys[key] = t
	}
	t.n++
}

func (o *openTxs) leave(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.keys[key]
	if t.n--; t.n == 0 {
		close(t.ended)
		delete(o.keys, key)
	}
}

// ended returns a channel closed once no transaction of key is open here,
// or nil when none is.
func (o *openTxs) ended(key string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t := o.keys[key]; t != nil {
		return t.ended
	}
	return nil
}

// awaitSpare returns once a connection of the pool may be taken for key
// (see the file comment), or with ctx's cause when ctx ends first.
func (g *Guard) awaitSpare(ctx context.Context, key string) error {
	for {
		ended := g.open.ended(key) // nil, the common case, costs no pool statistics
		if ended == nil {
			return nil
		}
		if s := g.db.Stats(); s.MaxOpenConnections <= 0 || s.InUse < s.MaxOpenConnections-1 {
			return nil
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}
