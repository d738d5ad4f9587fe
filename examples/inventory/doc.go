// Command inventory is redfence's demonstration: an inventory service that
// must never sell more than it has, and a load driver that shows what each
// way of writing it does under concurrency and faults.
//
// With no arguments it runs three modes side by side against the local Redis
// and MySQL (REDIS_ADDR, default 127.0.0.1:6379; MYSQL_DSN, default
// root@tcp(127.0.0.1:3306)/, database redfence_inventory created if needed):
//
//   - unsafe: read the stock, then write it, without a lock. Oversells.
//   - redis-only: the same under a Redis lock without a fence, while
//     holders stall past their lease (-pause) and one grant is lost in Redis
//     as in a failover (-failover). Oversells.
//   - guard: the same inside guard.Do (lock, fencing token checked by MySQL
//     in the same transaction), under the same faults. Never oversells.
//
// Each simulated application instance (-instances) has its own Redis client,
// Locker and database pool. A stall freezes the holder and its instance's
// Redis traffic, renewals included, as a stop-the-world pause would.
//
// It prints live progress on stderr and a report on stdout, and exits with
// status 1 when a mode that claims safety oversold, 2 when a server cannot be
// reached.
//
//	go run ./examples/inventory
//	go run ./examples/inventory -mode guard -buyers 128 -pause 0 -failover=false
//	go run ./examples/inventory serve -addr 127.0.0.1:8080
//
// The serve subcommand runs the service as an HTTP API backed by guard.Do:
//
//	POST /orders      {"sku":"widget","qty":2} -> 201, 409 sold out, 400, 404, 503
//	GET  /stock/{sku}                         -> 200, 404, 503
package main
