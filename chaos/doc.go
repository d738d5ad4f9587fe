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
// Scenario galera-multi-primary (scenario_galera_test.go) writes through the
// three nodes of a MariaDB Galera Cluster it starts itself (internal/testenv;
// mariadbd, the galera-4 provider and rsync must be installed), kills one
// node with SIGKILL and cuts another off from the cluster.
//
// Three scenarios make two writers of one key overlap on purpose, so that
// only the fence row stands between them and a lost update:
//   - lost-grant-in-fn (scenario_lostgrant_test.go): the lock's Redis keys
//     are deleted, as by a failover to a replica that missed them, while the
//     holder is inside fn between reading the stock and writing it; it does
//     not notice (its lease is long). A newer holder is granted the lock at
//     once and must wait for the older transaction's fence row rather than
//     read the stock the older one is about to overwrite.
//   - lost-grant-retry: the same, with the older holder's MySQL connection
//     also killed inside fn, after its claim. Once the newer holder has
//     committed, guard retries the older transaction under its old token;
//     the retried attempt must claim again and be fenced.
//   - token-replay (scenario_replay_test.go): a clone of the holder
//     ([ReplayBuy]) claims with the holder's token under an owner of its
//     own, under load, either while the holder is inside fn or before the
//     holder's claim reaches MySQL. Only the first to present the token may
//     commit.
//
// Besides checking the history, [VerifyDatabase] requires the orders, in
// commit order, to carry strictly increasing tokens, and the fence row to
// name the last committed order (its token and claim operation id).
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
