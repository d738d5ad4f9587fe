// Command galerabench measures guard.Do on a three-node MariaDB Galera
// Cluster against one MariaDB server with the same settings (wsrep off), in
// one run, and prints each cluster figure as a ratio to the single server's.
//
// It starts both itself on free loopback ports (mariadbd, the galera-4
// provider and rsync must be installed; see internal/testenv) and stops them
// at the end. Redis comes from -redis (REDIS_ADDR); keys go under a random
// prefix and are deleted at the end.
//
// Two workloads, each run against three targets, the targets alternating,
// -rounds runs of -d each after a short warm-up:
//
//   - hot: -hot-callers callers on one key, each Do a read-modify-write of
//     one row;
//   - spread: -callers callers on as many keys (one each), the same
//     read-modify-write of the caller's own row.
//
// The targets: "single" (the one server), "cluster/1" (the cluster, every
// caller through node 1), "cluster/3" (callers spread over the three nodes,
// one Locker, Guard and pool per node) and "cluster/3c" (the same with
// wsrep_sync_wait=1 on the pools' sessions, so that each transaction's BEGIN
// waits until its node has applied the previous holder's commit). Per run: committed operations
// per second, latency p50/p99, transaction retries (a Galera certification
// failure or brute-force abort is one), and errors. Then the ratios of the
// cluster targets to single.
//
// Usage:
//
//	go run ./bench/galerabench [-redis 127.0.0.1:6379] [-d 5s] [-rounds 2]
//	    [-hot-callers 16] [-callers 64]
package main
