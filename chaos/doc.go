// Package chaos is redfence's fault-injection suite: it runs the inventory
// workload against real redis-server, Sentinel and MySQL processes on
// loopback, injects failovers, pauses, partitions, latency, killed
// connections and crashes, records every operation, and checks each history
// for linearizability with porcupine against an inventory model.
//
// The package holds the machinery (proxies, process control, the Sentinel
// topology, the history recorder, the model and the workload); the
// scenarios are its tests. It lives in a Go module of its own so that its
// heavy dependencies never reach users of the library.
//
// Run it with
//
//	cd chaos && go test -count=1 ./...
//
// Each scenario prints one summary line (go test -v shows it; every run also
// appends it to artifacts/summary.txt). When a history is not linearizable,
// porcupine's HTML visualisation is written under artifacts/ and its path is
// named in the failure message.
package chaos
