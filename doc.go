// Package redfence makes critical sections safe across many instances of an
// application by pairing a fair Redis lock with a fence checked by MySQL in
// the same transaction as the guarded writes.
//
// The work is done by its packages:
//
//   - [github.com/redfence/redfence/redislock]: a FIFO-fair Redis lock with
//     a wait queue, pub/sub hand-off, lease renewal and a monotonic fencing
//     token for every holder.
//   - [github.com/redfence/redfence/fence]: inside the business transaction,
//     Claim checks the token against a fence row, so the database itself
//     rejects the write of a holder whose lock expired without its knowing.
//   - [github.com/redfence/redfence/migrations]: the fence table.
//   - [github.com/redfence/redfence/guard]: Guard.Do, the whole sequence in
//     one call: lock, begin, claim, pass the lock on (the fence row's lock now
//     keeps the next holder out), fn, commit.
//
// Redis gives fairness and efficiency (waiters wait in Redis, not on
// database connections); MySQL is the final arbiter of safety.
//
// The example in examples/inventory shows the difference on a hot SKU:
//
//	docker compose up -d           # or local Redis and MySQL/MariaDB
//	go run ./examples/inventory    # unsafe and redis-only oversell; guard never does
//
// This package itself holds no code: its tests are the end-to-end tests that
// run the packages together against real servers.
package redfence
