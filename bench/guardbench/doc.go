// Command guardbench measures guard.Do against plain MySQL transactions on
// the same servers, in one run:
//
//   - uncontended: Do with one UPDATE against the bare transaction (BEGIN;
//     UPDATE; COMMIT) without lock or claim: latency p50 and mean, their
//     ratio, and Redis and MySQL round trips per operation (counted on the
//     sockets: a read that follows a write is one round trip);
//   - hot key: C callers on one key with a DB pool of P connections, Do with a
//     read-modify-write against the MySQL-only alternative in the same
//     transaction shape (BEGIN; SELECT ... FOR UPDATE; UPDATE; COMMIT):
//     throughput, latency p50/p99/max, the most DB connections in use at
//     once (queued Do callers hold none), and CPU time per operation of this
//     process, the database server and the Redis server, with the share of
//     the machine left idle. The variants alternate, two runs each.
//
// Usage:
//
//	go run ./bench/guardbench [-redis 127.0.0.1:6379] [-mysql 'root@tcp(127.0.0.1:3306)/']
//	    [-n 2000] [-callers 256] [-pool 16] [-d 5s] [-interpolate=true]
//	    [-hot do] [-cpuprofile file]
//
// It creates a scratch database and Redis keys under a random prefix and
// removes both at the end.
package main
