package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// writeReport prints the side-by-side report of a run and returns whether
// every mode that claims safety kept it.
func writeReport(w io.Writer, cfg demoConfig, results []*modeResult) (ok bool) {
	fmt.Fprintf(w, "\nredfence inventory demo: %d buyers on %d app instances (own Redis client, Locker and DB pool each)\n",
		cfg.buyers, cfg.instances)
	fmt.Fprintf(w, "one SKU %q, stock %d, each buyer orders %d x %d unit(s) until sold out (demand %d)",
		cfg.sku, cfg.stock, cfg.orders, cfg.qty, cfg.buyers*cfg.orders*cfg.qty)
	if cfg.work > 0 {
		fmt.Fprintf(w, ", %v of work between read and write", cfg.work)
	}
	fmt.Fprintln(w)
	if cfg.where != "" {
		fmt.Fprintf(w, "servers: %s\n", cfg.where)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\taccepted\tunits sold\tfinal stock\tOVERSOLD\tlost updates\tfenced\tlock lost\terrors\torders/s\tp50\tp99\t")
	for _, r := range results {
		t := r.totals
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%.0f\t%s\t%s\t\n",
			r.mode, t.Orders, t.Sold, t.Final, t.Oversold, t.Lost, r.fenced.Load(), lockLostCell(r), r.failed.Load(),
			r.throughput(), ms(r.percentile(50)), ms(r.percentile(99)))
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	ok = true
	for _, r := range results {
		fmt.Fprintf(w, "%-10s %s\n", r.mode+":", verdict(r))
		fmt.Fprintf(w, "%-10s injected: %s\n", "", injectedText(cfg, r))
		if r.outage != nil {
			fmt.Fprintf(w, "%-10s served: %s\n", "", r.outage.servedText())
			fmt.Fprintf(w, "%-10s Guards switched to database mode %d time(s) and back to Redis %d time(s)\n", "", r.switches[0], r.switches[1])
		}
		for _, e := range r.errs {
			fmt.Fprintf(w, "%-10s error: %s\n", "", e)
		}
		if !r.safe() {
			ok = false
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "accepted, units sold and final stock are read from the database; OVERSOLD = units sold beyond the")
	fmt.Fprintln(w, "initial stock; lost updates = units sold that the stock does not account for (initial - final - sold).")
	if ok {
		fmt.Fprintln(w, "result: PASS (no mode that claims safety oversold or lost an update)")
	} else {
		fmt.Fprintln(w, "result: FAIL (a mode that claims safety oversold, lost an update or failed orders)")
	}
	return ok
}

func lockLostCell(r *modeResult) string {
	if r.mode == modeRedisOnly {
		// redis-only does not watch its lock; it finds out at Unlock.
		return fmt.Sprintf("%d*", r.lostAtUnlock.Load())
	}
	return fmt.Sprint(r.lockLost.Load())
}

func verdict(r *modeResult) string {
	t := r.totals
	switch {
	case t.OK() && claimsSafety(r.mode):
		return fmt.Sprintf("never oversold: %d orders for %d units, final stock %d = %d - %d",
			t.Orders, t.Sold, t.Final, t.Initial, t.Sold)
	case t.OK():
		return fmt.Sprintf("did not oversell this time (%d units sold); try more buyers or a longer -work", t.Sold)
	default:
		s := fmt.Sprintf("OVERSOLD %d units: sold %d of a stock of %d, %d sale(s) lost from the stock", t.Oversold, t.Sold, t.Initial, t.Lost)
		if r.mode == modeRedisOnly {
			s += fmt.Sprintf(" (%d holder(s) found at unlock, after writing, that the lock had expired: *)", r.lostAtUnlock.Load())
		}
		return s
	}
}

func injectedText(cfg demoConfig, r *modeResult) string {
	if r.mode == modeUnsafe {
		return "nothing (no lock: concurrent buyers read the same stock)"
	}
	if len(r.injected) == 0 {
		if cfg.pause <= 0 && !cfg.failover {
			return "nothing (-pause 0 -failover=false)"
		}
		return "nothing (the run ended before the stall points)"
	}
	return strings.Join(r.injected, "; ") + fmt.Sprintf(" (lease %v)", cfg.lease)
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
