package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is an in-process toxiproxy TCP proxy on a loopback port, placed
// between one client (or one replica) and one server so that a test can cut,
// slow down or reset exactly that path.
type Proxy struct {
	// Addr is the address clients dial instead of the upstream.
	Addr     string
	Upstream string

	p   *toxiproxy.Proxy
	seq atomic.Int64
}

// NewProxy starts a proxy in front of upstream and stops it when the test
// ends.
func NewProxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("chaos: start proxy %s to %s: %v", name, upstream, err)
	}
	px := &Proxy{Addr: p.Listen, Upstream: upstream, p: p}
	t.Cleanup(px.Close)
	return px
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() { p.p.Stop() }

// Toxic is a fault installed on a proxy; Remove takes it away again.
type Toxic struct {
	p    *Proxy
	name string
}

// Direction tells which way a toxic acts: Upstream is client to server,
// Downstream server to client.
type Direction string

// The two directions of a proxied connection.
const (
	Upstream   Direction = "upstream"
	Downstream Direction = "downstream"
)

func (p *Proxy) add(kind string, dir Direction, attrs string) (*Toxic, error) {
	name := fmt.Sprintf("%s_%s_%d", kind, dir, p.seq.Add(1))
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":{%s}}`, name, kind, dir, attrs)
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		return nil, fmt.Errorf("chaos: add %s toxic: %w", kind, err)
	}
	return &Toxic{p: p, name: name}, nil
}

// Remove takes the toxic away. A removed latency toxic releases the data it
// was holding at once; a removed timeout toxic closes the connections it was
// blackholing (as a healed partition whose TCP sessions timed out would).
func (x *Toxic) Remove() error {
	if err := x.p.p.Toxics.RemoveToxic(context.Background(), x.name); err != nil {
		return fmt.Errorf("chaos: remove toxic %s: %w", x.name, err)
	}
	return nil
}

// Blackhole drops every byte in direction dir, without closing anything,
// until the toxic is removed: a network partition.
func (p *Proxy) Blackhole(dir Direction) (*Toxic, error) {
	return p.add("timeout", dir, `"timeout":0`)
}

// Latency delays every chunk in direction dir by ms milliseconds.
func (p *Proxy) Latency(dir Direction, ms int64) (*Toxic, error) {
	return p.add("latency", dir, fmt.Sprintf(`"latency":%d,"jitter":0`, ms))
}

// ResetPeer resets (TCP RST) every connection as soon as data flows in
// direction dir.
func (p *Proxy) ResetPeer(dir Direction) (*Toxic, error) {
	return p.add("reset_peer", dir, `"timeout":0`)
}

// Partition blackholes both directions. The returned function heals it.
func (p *Proxy) Partition() (heal func() error, err error) {
	up, err := p.Blackhole(Upstream)
	if err != nil {
		return nil, err
	}
	down, err := p.Blackhole(Downstream)
	if err != nil {
		_ = up.Remove()
		return nil, err
	}
	return func() error {
		e1 := up.Remove()
		e2 := down.Remove()
		if e1 != nil {
			return e1
		}
		return e2
	}, nil
}
