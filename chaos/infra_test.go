package chaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// The model must reject a history in which two buys were both accepted
// although the stock only covered one (an oversell), write the HTML
// visualisation, and accept the same history when one of them is of unknown
// outcome and the other sold out.
func TestModelRejectsOversellAndWritesVisualisation(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	bad := []Op{
		{ID: "a", Client: 0, Kind: Buy, Qty: 2, Call: ms(0), Return: ms(10), Outcome: Accepted},
		{ID: "b", Client: 1, Kind: Buy, Qty: 2, Call: ms(1), Return: ms(11), Outcome: Accepted},
		{Client: 2, Kind: Read, Call: ms(20), Return: ms(21), Outcome: Ok, Stock: 1},
	}
	dir := t.TempDir()
	res, err := CheckLinearizable(bad, 3, 10*time.Second, dir, "broken")
	if err != nil {
		t.Fatal(err)
	}
	if res.Linearizable {
		t.Fatal("an oversold history was judged linearizable")
	}
	html, err := os.ReadFile(res.Visualisation)
	if err != nil {
		t.Fatalf("visualisation not written: %v", err)
	}
	if !strings.Contains(string(html), "buy(2)") {
		t.Fatalf("visualisation %s does not describe the operations", res.Visualisation)
	}

	good := []Op{
		{ID: "a", Client: 0, Kind: Buy, Qty: 2, Call: ms(0), Return: ms(10), Outcome: Accepted},
		{ID: "b", Client: 1, Kind: Buy, Qty: 2, Call: ms(1), Return: ms(11), Outcome: SoldOut},
		{ID: "c", Client: 3, Kind: Buy, Qty: 1, Call: ms(2), Outcome: Unknown},
		{Client: 2, Kind: Read, Call: ms(20), Return: ms(21), Outcome: Ok, Stock: 0},
		{ID: "d", Client: 1, Kind: Buy, Qty: 1, Call: ms(30), Return: ms(31), Outcome: Fenced},
	}
	if res, err := CheckLinearizable(good, 3, 10*time.Second, dir, "good"); err != nil || !res.Linearizable {
		t.Fatalf("a valid history was rejected: %+v %v", res, err)
	}
	// A stale read (stock seen after the accepted buy returned) is caught too.
	stale := []Op{
		{ID: "a", Client: 0, Kind: Buy, Qty: 1, Call: ms(0), Return: ms(10), Outcome: Accepted},
		{Client: 1, Kind: Read, Call: ms(20), Return: ms(21), Outcome: Ok, Stock: 3},
	}
	if res, _ := CheckLinearizable(stale, 3, 10*time.Second, dir, "stale"); res.Linearizable {
		t.Fatal("a stale read was judged linearizable")
	}
	// A fenced buy that nevertheless took effect is caught.
	fenced := []Op{
		{ID: "a", Client: 0, Kind: Buy, Qty: 1, Call: ms(0), Return: ms(10), Outcome: Fenced},
		{Client: 1, Kind: Read, Call: ms(20), Return: ms(21), Outcome: Ok, Stock: 2},
	}
	if res, _ := CheckLinearizable(fenced, 3, 10*time.Second, dir, "fenced"); res.Linearizable {
		t.Fatal("a fenced buy that took effect was judged linearizable")
	}
}

func TestSummaryLine(t *testing.T) {
	s := Summary{Scenario: "x", Ops: 10, Accepted: 4, Fenced: 1, Unknown: 2, Linearizable: true}
	want := "scenario=x ops=10 accepted=4 fenced=1 unknown=2 oversold=0 linearizable=yes"
	if got := s.Line(); !strings.HasPrefix(got, want) {
		t.Fatalf("summary line %q does not start with %q", got, want)
	}
}

// The proxy passes traffic, blackholes it on demand (a partition), delays it,
// and resets connections.
func TestProxyFaults(t *testing.T) {
	srv := testenv.RedisServer(t)
	px := NewProxy(t, "redis", srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping through proxy: %v", err)
	}

	heal, err := px.Partition()
	mustNoErr(t, err, "partition")
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("ping went through a partition")
	}
	mustNoErr(t, heal(), "heal")
	if err := waitFor(ctxT(t, 5*time.Second), 20*time.Millisecond, func() (bool, error) { return rdb.Ping(ctx).Err() == nil, nil }); err != nil {
		t.Fatalf("no traffic after healing: %v", err)
	}

	lat, err := px.Latency(Upstream, 150)
	mustNoErr(t, err, "latency")
	slow := redis.NewClient(&redis.Options{Addr: px.Addr, MaxRetries: -1})
	defer slow.Close()
	start := time.Now()
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("ping through 150ms latency took %v", d)
	}
	mustNoErr(t, lat.Remove(), "remove latency")

	rst, err := px.ResetPeer(Upstream)
	mustNoErr(t, err, "reset_peer")
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("ping went through reset_peer")
	}
	mustNoErr(t, rst.Remove(), "remove reset_peer")
	if err := waitFor(ctxT(t, 5*time.Second), 20*time.Millisecond, func() (bool, error) { return rdb.Ping(ctx).Err() == nil, nil }); err != nil {
		t.Fatalf("no traffic after removing reset_peer: %v", err)
	}
}

// The Sentinel topology fails over to the replica when the primary is killed,
// and the Sentinel-aware client follows.
func TestTopologyFailover(t *testing.T) {
	tp := StartTopology(t)
	rdb := tp.Client(t)
	ctx := ctxT(t, 30*time.Second)
	mustNoErr(t, rdb.Set(ctx, "k", "v", 0).Err(), "set on primary")
	tp.Primary.Kill()
	start := time.Now()
	mustNoErr(t, tp.WaitPromoted(ctx), "promotion")
	t.Logf("replica promoted %v after the primary was killed", time.Since(start).Round(time.Millisecond))
	if err := waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		v, err := rdb.Get(ctx, "k").Result()
		return v == "v", err
	}); err != nil {
		t.Fatalf("client did not follow the failover: %v", err)
	}
}

// The holder process starts, freezes, resumes and dies on command.
func TestHolderProcessControl(t *testing.T) {
	e := newEnv(t, "holder-control", 10)
	srv := testenv.RedisServer(t)
	h := StartHolder(t, holder(t), HolderConfig{Redis: srv.Addr, DSN: e.dsn, Item: e.item, Prefix: e.prefix,
		LeaseTTL: time.Second, WaiterTimeout: time.Second, Recheck: 250 * time.Millisecond})
	ctx := ctxT(t, 20*time.Second)
	mustNoErr(t, h.Send("buy op-x 2 wait"), "send")
	ev, err := h.Expect(ctx, "infn")
	mustNoErr(t, err, "infn")
	mustNoErr(t, h.Stop(), "SIGSTOP")
	mustNoErr(t, h.Send("go"), "send go")
	mustNoErr(t, h.Continue(), "SIGCONT")
	ev, err = h.Expect(ctx, "done")
	mustNoErr(t, err, "done")
	if ev.Fields[1] != "accepted" {
		t.Fatalf("buy: %v", ev.Fields)
	}
	if n := e.ordersOf("op-x"); n != 1 {
		t.Fatalf("op-x has %d orders", n)
	}
	h.Kill()
	if _, err := h.Expect(ctx, "anything"); err == nil {
		t.Fatal("killed holder still talks")
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Unknown buys resolved by the orders the database holds: one with an order
// takes effect (somewhere after its call), one without takes none, and a
// read that disagrees with the resolved effects is caught.
func TestResolveUnknown(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	ops := []Op{
		{ID: "a", Client: 0, Kind: Buy, Qty: 1, Call: ms(0), Outcome: Unknown},
		{ID: "b", Client: 1, Kind: Buy, Qty: 1, Call: ms(1), Outcome: Unknown},
		{Client: 2, Kind: Read, Call: ms(20), Return: ms(21), Outcome: Ok, Stock: 2},
	}
	dir := t.TempDir()
	resolved := ResolveUnknown(ops, map[string]bool{"a": true})
	if resolved[0].Outcome != Applied || resolved[1].Outcome != Failed || ops[0].Outcome != Unknown {
		t.Fatalf("resolved outcomes %v %v (input left %v), want applied, failed and the input untouched",
			resolved[0].Outcome, resolved[1].Outcome, ops[0].Outcome)
	}
	if res, err := CheckLinearizable(resolved, 3, 10*time.Second, dir, "resolved"); err != nil || !res.Linearizable {
		t.Fatalf("one applied buy and a read of 2 rejected: %+v %v", res, err)
	}
	// Neither has an order: the read of 2 cannot be explained, which the
	// unresolved history (either may have applied) would have allowed.
	if res, err := CheckLinearizable(ops, 3, 10*time.Second, dir, "unresolved"); err != nil || !res.Linearizable {
		t.Fatalf("the unresolved history was rejected: %+v %v", res, err)
	}
	none := ResolveUnknown(ops, map[string]bool{})
	if res, _ := CheckLinearizable(none, 3, 10*time.Second, dir, "none"); res.Linearizable {
		t.Fatal("a read of 2 with no buy applied was judged linearizable")
	}
	// Both applied: the stock can fall to 1, never to 0.
	both := ResolveUnknown(ops, map[string]bool{"a": true, "b": true})
	both[2].Stock = 0
	if res, _ := CheckLinearizable(both, 3, 10*time.Second, dir, "both"); res.Linearizable {
		t.Fatal("a read of 0 after two buys of 1 from 3 was judged linearizable")
	}
}
