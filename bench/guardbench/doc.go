// Command guardbench measures guard.Do against plain MySQL transactions on
// the same servers, in one run, in up to three modes (-mode, in the order
// given):
//
//   - uncontended: Do with one UPDATE against the bare transaction (BEGIN;
//     UPDATE; COMMIT) without lock or claim: latency p50 and mean, their
//     ratio, and Redis and MySQL round trips per operation (counted on the
//     sockets: a read that follows a write is one round trip); then, per
//     variant, each kind of request (a statement's verb, CALL and the
//     procedure, BEGIN NOT ATOMIC, a Redis command) with its count and mean
//     time per operation, from its write (after the -rtt delay) to the first
//     bytes of its reply: what each request costs the servers, apart from
//     the network; and with -steps, the means of Do's stages
//     (Hooks.OnStep: lock, claim, fn, commit, unlock);
//   - hot: -callers callers on one key with a DB pool of -pool connections,
//     Do with a read-modify-write against the MySQL-only alternative in the
//     same transaction shape (BEGIN; SELECT ... FOR UPDATE; UPDATE; COMMIT);
//   - mixed: a flash sale beside normal traffic: -hot-callers callers on the
//     hot key and -cold-callers callers doing the same read-modify-write on
//     random rows of a -cold-rows table (one key per row), all sharing one
//     pool of -pool connections; each operation gets a ctx bounded by
//     -op-timeout (default 30s here), so COMMIT is bound to it as in a
//     service.
//
// guard.Do runs through Guards on the same Locker and pool: the defaults
// (do: the lock handed on at the claim, transactions relayed), the lock
// held until the transaction ends without relaying (atend: Options.HandOff
// HandOffAtEnd and NoRelay), the hand-off at the claim alone (handoff:
// NoRelay) and relaying alone (relay: HandOffAtEnd), which run by default;
// and, when -hot names them, three that combine callers with
// Options.MaxBatch -batch (default 16): batch, batchsp (with
// Options.BatchSavepoints) and batchatend (with HandOffAtEnd and NoRelay).
// The uncontended mode runs the defaults and atend.
//
// For hot and mixed, per variant: throughput of the hot and the cold
// callers and in all, latency p50/p99/max, the most DB connections in use at
// once and the most inside a transaction of the hot key's callers and of the
// cold ones (queued Do callers hold none), Redis and MySQL round trips per
// operation, and CPU time per operation of this process, the database server
// and the Redis server, with the share of the machine left idle; what the
// Go scheduler of this process did per operation (goroutines created, waits
// of a runnable goroutine before it ran, and the p50/p90/p99 of those waits,
// from runtime/metrics), which is what each hop of an operation costs in a
// busy process; then one
// summary line of ratios per guard.Do variant, over SELECT ... FOR UPDATE. The variants
// alternate, -rounds runs of -d each, after a short unmeasured warm-up.
//
// -rtt D models servers on other hosts: every request written on every Redis
// and MySQL connection is held back by D (a sleep, so by a little more: the
// run prints what a round trip really gains).
//
// Usage:
//
//	go run ./bench/guardbench [-redis 127.0.0.1:6379] [-mysql 'root@tcp(127.0.0.1:3306)/']
//	    [-mode uncontended,hot,mixed] [-rtt 0] [-n 2000] [-callers 256]
//	    [-hot-callers 128] [-cold-callers 32] [-cold-rows 10000] [-pool 16]
//	    [-d 5s] [-rounds 2] [-op-timeout D] [-interpolate=true] [-hot do,atend,handoff,relay]
//	    [-maxbatch 0] [-batch 16] [-new-keys] [-steps] [-cpuprofile file] [-cpuprofile-variant do]
//
// -maxbatch sets guard.Options.MaxBatch of the do, atend, handoff and relay
// Guards (0: off); -batch that of the batch variants.
//
// Before the runs it creates the fence row of every key (token 0, as
// fence.Ensure does), the state of a shop whose items have all sold before;
// -new-keys leaves them out, so that each key's first Do also creates its
// row.
//
// It creates a scratch database and Redis keys under a random prefix and
// removes both at the end.
package main
