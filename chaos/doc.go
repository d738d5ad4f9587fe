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
// Guards run with their defaults (the lock handed on at the claim,
// transactions relayed between a key's callers) unless a scenario says
// otherwise. The scenarios, each named as in its summary line:
//   - failover-lost-grant (scenario_failover_test.go): Sentinel promotes a
//     replica that missed a grant; the stale holder's late claim must be
//     rejected by the database.
//   - paused-holder (scenario_pause_test.go): a holder process is frozen
//     with SIGSTOP inside fn past its lease, with Guards that hold the lock
//     until the transaction ends (guard.HandOffAtEnd, no relaying); its late
//     write must not apply.
//   - redis-partition (scenario_partition_test.go): one client is cut off
//     from Redis while it holds the lock (until its transaction ends,
//     guard.HandOffAtEnd), and while it waits in the queue.
//   - redis-partition-handoff (scenario_partition_test.go): with the
//     defaults, one client is cut off from Redis between its grant and its
//     hand-off at the claim: it must still claim and commit, and the others
//     get the lock within about a lease, when the unlock it could not send
//     has expired.
//   - unlock-reply-lost (scenario_unlockreply_test.go): Redis's replies to
//     one client, whose Locker serves three buyers, are dropped from the
//     moment it is granted the lock while its requests still arrive: its
//     unlock hands the lock on, often to a buyer of its own Locker (whom a
//     release tells itself rather than over pub/sub), without hearing
//     back. Once the replies flow again the queue must move on, and no
//     buy may be fenced (a fenced buy means two holders of one turn).
//   - db-latency (scenario_latency_test.go): one client's database traffic
//     is slowed, then held back while its lock is lost and another holder
//     commits; the held statements must not apply when released.
//   - kill-during-commit (scenario_killcommit_test.go): a holder's MySQL
//     connection is killed during COMMIT, before it reaches the server or
//     after it applied; nothing may be applied twice, and Do, holding the
//     lock until the transaction ends (guard.HandOffAtEnd), must settle
//     every outcome.
//   - kill-during-commit-handoff (scenario_killcommit_test.go): the same
//     with the defaults; an unknown outcome is allowed (a newer claim may
//     land first), a wrong definite one is not.
//   - killed-processes (scenario_kill9_test.go): holders and waiters killed
//     with SIGKILL must not stall the queue beyond the lease and the waiter
//     timeout (with guard.HandOffAtEnd, so that waiters queue in Redis).
//   - redis-restart (scenario_restart_test.go): Redis restarted without
//     persistence under load, three times; tokens at the database must
//     still increase strictly.
//   - redis-outage-with-data and redis-outage-empty
//     (scenario_outage_test.go): Redis killed for ten seconds under Guards
//     with the database fallback, restarted with its data or empty; buying
//     goes on in database mode at no less than half the throughput of plain
//     SELECT … FOR UPDATE, and the Guards switch to the database and back.
//   - commit-cut (scenario_commitcut_test.go): the database path of a
//     holder goes silent just as its COMMIT leaves; Do must return by the
//     end of its ctx and leave the lock to the next holder.
//   - galera-multi-primary (scenario_galera_test.go): writes through the
//     three nodes of a MariaDB Galera Cluster it starts itself
//     (internal/testenv; mariadbd, the galera-4 provider and rsync must be
//     installed), while the lock is deleted under its holders, one node is
//     killed with SIGKILL and another is cut off from the cluster.
//
// Three more make two writers of one key overlap on purpose, so that only
// the fence row stands between them and a lost update:
//   - lost-grant-in-fn (scenario_lostgrant_test.go): the lock's Redis keys
//     are deleted, as by a failover to a replica that missed them, while the
//     holder is inside fn between reading the stock and writing it; it does
//     not notice (its lease is long). A newer holder is granted the lock at
//     once and must wait for the older transaction's fence row rather than
//     read the stock the older one is about to overwrite.
//   - lost-grant-retry (scenario_lostgrant_test.go): the same, with the
//     older holder's MySQL connection also killed inside fn, after its
//     claim. Once the newer holder has committed, guard, holding the lock
//     until the transaction ends (guard.HandOffAtEnd), retries the older
//     transaction under its old token; the retried attempt must claim again
//     and be fenced.
//   - lost-grant-retry-handoff (scenario_lostgrant_test.go): the same with
//     the defaults, whose retry takes a new turn and token: it may commit,
//     but only under a token above the newer holder's.
//
// Each lost-grant scenario ends with a round in which the older holder,
// still inside fn, must learn at its next renewal, while the newer holder
// holds the lock, that it lost it (guard's OnLost, fn's ctx ended with
// ErrLockLost), and must leave the newer holder's lock and lease as they
// are.
//   - token-replay (scenario_replay_test.go): a clone of the holder
//     ([ReplayBuy]) claims with the holder's token under an owner of its
//     own, under load, either while the holder is inside fn or before the
//     holder's claim reaches MySQL. Only the first to present the token may
//     commit.
//   - paused-holder-handoff (scenario_pause_handoff_test.go): as
//     paused-holder, with Guards on the defaults, which hand the lock on at
//     the claim and relay transactions: the next holder's claim
//     waits for the frozen transaction's fence row, and the frozen holder's
//     late write is never applied under its old token.
//   - batched (scenario_batch_test.go): two processes whose Guards combine
//     queued callers (guard.Options.MaxBatch) with several buyers each and
//     hold the lock until a batch's transaction ends (guard.HandOffAtEnd),
//     while the lock's Redis keys are deleted under its holders and
//     connections inside transactions are killed.
//   - batched-handoff (scenario_batch_test.go): as batched, with Guards on
//     the defaults, whose batches hand the lock on at their claim and chain
//     their transactions to the next batch.
//   - batch-commit-cut (scenario_batchcommit_test.go): a batching process
//     (guard.HandOffAtEnd, no relaying) whose batches' COMMITs are cut,
//     alternately before the server (nothing applied: no member may get
//     nil) and after it applied with the reply lost (no member may be told
//     it did not commit); each member must get its batch's true outcome.
//   - batch-commit-cut-handoff (scenario_batchcommit_test.go): the same
//     with the defaults; an unknown outcome is allowed, a wrong definite
//     one is not.
//   - unseen-end (scenario_unseenend_test.go): careless fns under load on
//     the defaults, while the lock's Redis keys are deleted under their
//     holders: some end their transaction with statements Tx does not read
//     as such (SET STATEMENT … FOR COMMIT, a comment Tx misreads, DDL,
//     multi-statement texts) and write on; some drop the deadlock a locking
//     range read met after rows streamed. No buy whose fn ended its
//     transaction may be reported committed, and no write after the end
//     may apply.
//   - early-begin (scenario_earlybegin_test.go): four instances with small
//     pools buy through a Redis that answers late, so that calls begin
//     their transactions beside their lock requests and give them back
//     when queued, while Redis is cut off twice and MySQL slows down; after
//     the load every connection of every pool must be back.
//   - claim-rides (scenario_ride_test.go): three processes whose Guards
//     send the claim with fn's first statement
//     (guard.Options.ClaimWithFirstStatement), while the lock's Redis keys
//     are deleted under their holders (two holders start fn before their
//     claims are known, and only the fence row keeps their statements
//     apart) and connections in a transaction are killed; claims must have
//     ridden and the kills hit.
//   - read-rides (scenario_ride_test.go): the same faults, with buys made
//     by guard.DoRead, whose read of the item goes with the claim before fn
//     starts, the lock handed on at the claim.
//
// Besides checking the history, [VerifyDatabase] requires the orders, in
// commit order, to carry strictly increasing tokens from one transaction to
// the next (the orders of one batch share theirs), the fence row to name
// the last committed order (its token and claim operation id), and each
// order to have seen its own transaction's claim in the fence row when it
// was written.
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
