package chaos

import (
	"fmt"
	"sync"
	"time"
)

// Kind is the kind of an operation on the inventory.
type Kind int

// The operations of the inventory workload.
const (
	// Buy takes Qty units if at least Qty are in stock.
	Buy Kind = iota
	// Read returns the stock.
	Read
)

// Outcome is what a buy returned, as far as the caller can tell.
type Outcome int

// Outcomes of operations. Only Unknown leaves the effect undetermined; every
// other outcome is a claim about the database that the checks hold the
// library to.
const (
	// Accepted: the buy committed.
	Accepted Outcome = iota
	// SoldOut: fewer than Qty units were in stock; nothing was written.
	SoldOut
	// Fenced: the database rejected the holder's token; nothing was written.
	Fenced
	// Failed: the operation failed in a way that means it was not applied
	// (not acquired, not committed).
	Failed
	// Unknown: the caller cannot tell whether the buy committed (timeouts,
	// connection lost at commit, lock lost mid-transaction).
	Unknown
	// Ok: a read returned a value.
	Ok
	// Applied: the caller could not tell (Unknown), but the database shows
	// that the buy committed; set by ResolveUnknown for the linearizability
	// check only, never by a client.
	Applied
)

var outcomeNames = [...]string{"accepted", "soldout", "fenced", "failed", "unknown", "ok", "applied"}

// String names the outcome as it appears in summaries and visualisations.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Op is one recorded operation. Times are offsets from the start of the
// history on the monotonic clock.
type Op struct {
	ID      string // operation id, written with the order (buys)
	Client  int
	Kind    Kind
	Qty     int // buys
	Call    time.Duration
	Return  time.Duration // meaningless when Outcome is Unknown
	Outcome Outcome
	Stock   int    // value returned by a read
	Token   uint64 // token the buy ran under, when known
	Err     string // error text, for the visualisation
}

// History records operations from many goroutines.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []Op
	next  int
}

// NewHistory starts an empty history; its clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Pending is an invoked operation waiting for its return.
type Pending struct {
	h  *History
	op Op
}

// Invoke records the call of an operation by client and returns the handle
// that records its return. The buy's operation id is generated here.
func (h *History) Invoke(client int, kind Kind, qty int) *Pending {
	h.mu.Lock()
	h.next++
	id := fmt.Sprintf("op-%d-%d", client, h.next)
	h.mu.Unlock()
	return &Pending{h: h, op: Op{ID: id, Client: client, Kind: kind, Qty: qty, Call: time.Since(h.start)}}
}

// ID returns the operation id.
func (p *Pending) ID() string { return p.op.ID }

// Return records the outcome of a buy (stock is ignored) or the value read.
func (p *Pending) Return(out Outcome, stock int, token uint64, err error) Op {
	p.op.Return = time.Since(p.h.start)
	p.op.Outcome = out
	p.op.Stock = stock
	p.op.Token = token
	if err != nil {
		p.op.Err = err.Error()
	}
	p.h.mu.Lock()
	p.h.ops = append(p.h.ops, p.op)
	p.h.mu.Unlock()
	return p.op
}

// Ops returns a copy of the recorded operations.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Since returns the current offset on the history's clock.
func (h *History) Since() time.Duration { return time.Since(h.start) }
