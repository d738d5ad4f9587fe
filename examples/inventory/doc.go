// Command inventory is redfence's demonstration: an inventory service that
// must never sell more than it has, and a load driver that shows what each
// way of writing it does under concurrency and faults.
//
// With no arguments it runs four modes side by side against the local Redis
// and MySQL (REDIS_ADDR, default 127.0.0.1:6379, or a redis:// URL for a
// server with a password; MYSQL_DSN, default root@tcp(127.0.0.1:3306)/,
// database redfence_inventory created if needed):
//
//   - unsafe: read the stock, then write it, without a lock. Oversells.
//   - redis-only: the same under a Redis lock without a fence, while
//     holders stall past their lease (-pause) and one grant is lost in Redis
//     as in a failover (-failover). Oversells.
//   - guard: the same inside guard.Do (lock, fencing token checked by MySQL
//     in the same transaction), under the same faults. Never oversells.
//   - batched: guard with guard.Options.Batch.Max 16: the buyers of one
//     instance that queue behind its holder join one transaction (one lock
//     turn, one claim, one COMMIT). Same faults; never oversells.
//
// Each simulated application instance (-instances) has its own Redis client,
// Locker and database pool. A stall freezes the holder and its instance's
// Redis traffic, renewals included, as a stop-the-world pause would.
//
// -redis-outage kill (or pause) shows what guard.Options.Outage.Fallback =
// guard.FallbackDatabase does while Redis is down. The guard mode then runs
// on instances whose Guards fall back on the database, against a
// redis-server the program starts for it (never the configured one, which
// other programs may share), and takes that server away once -outage-after
// orders were accepted (default: a quarter of the stock): kill stops it with
// SIGKILL and restarts it empty on the same port, pause freezes it with
// SIGSTOP and resumes it with SIGCONT. Redis is back after -outage-for
// (default 2s), or as soon as a quarter of the stock left when it went away
// is sold, so that some is left for the Guards' return to Redis. The report
// then says how many orders were served in Redis mode (before, during and
// after the outage) and in database mode, and how often the Guards switched,
// beside the usual check that nothing was oversold:
//
//	go run ./examples/inventory -mode guard -redis-outage kill
//
// It needs no setup. Both servers are probed at once; for each one where
// nothing answers, the program starts a throwaway server of its own and says
// so: an installed redis-server or mariadbd (system tables created with
// mariadb-install-db in a temporary directory, root without a password, free
// loopback ports), else a container through testcontainers-go when a Docker
// engine answers and the program was built with the containers tag (go run
// -tags containers ./examples/inventory; the default build leaves the
// container stack out, so that the first run compiles quickly). They are
// stopped and their files removed when the program ends, on Ctrl-C and
// SIGTERM too, and (on Linux) when the process that started it ends, such as
// go run's go command, which does not pass SIGTERM on. Killed with SIGKILL,
// the program cannot clean up: its servers die with it (the kernel kills
// them on Linux), and the directories they leave are removed by the next run
// that starts a server. When a server can be had in none of these ways, the
// program names every missing server in one message, within about two
// seconds, with the ways out: set REDIS_ADDR and MYSQL_DSN, run docker
// compose up -d, or install redis-server and mariadb-server. Refused
// credentials (MySQL error 1045, Redis NOAUTH or WRONGPASS) and settings
// that do not parse are reported as such and never replaced by a server of
// the program's own. -start-servers=false turns starting off.
//
// It prints live progress on stderr and a report on stdout, which says where
// the servers were. Its exit status is that of cmd/redfence: 0 done (no mode
// that claims safety oversold); 1 failed (such a mode oversold, the run
// failed or was interrupted, a server refused the credentials or answered
// with an error); 2 bad usage (flags, arguments, REDIS_ADDR or MYSQL_DSN
// that does not parse); 3 a server did not answer and none could be started
// in its place.
//
//	go run ./examples/inventory
//	go run ./examples/inventory -mode guard -buyers 128 -pause 0 -failover=false
//	go run ./examples/inventory serve -addr 127.0.0.1:8080
//
// The serve subcommand runs the service as an HTTP API backed by
// guard.DoRead (the stock read with the fence claim, the order in fn):
//
//	POST /orders      {"sku":"widget","qty":2} -> 201, 409 sold out, 400, 404, 503
//	GET  /stock/{sku}                         -> 200, 404, 503
//	GET  /healthz                             -> 200 ready, or 503 naming the missing servers
//	GET  /livez                               -> 200 while the process serves HTTP
//	GET  /metrics                             -> guard.Do's metrics, Prometheus text format
//
// /healthz is the readiness probe. It pings Redis and MySQL at the same
// time, each under its own deadline (-check-timeout, 1s), so a hung server
// costs one deadline and is the only one named, and answers 200 while the
// instance can serve orders: {"status":"ok","mode":"redis",
// "fallback":"none","checks":{"mysql":"ok","redis":"ok"}}. With -fallback
// database, orders go on without Redis, so the instance stays ready during a
// Redis outage, "degraded" and in database mode: {"status":"degraded",
// "mode":"database","fallback":"database","failing":["redis"],
// "checks":{"mysql":"ok","redis":"..."}}. Otherwise a missing server makes
// it 503, "unavailable". /livez, the liveness probe, checks no server:
// restarting the instance would not bring one back. /metrics counts Do calls
// as extra/redfenceotel does, under the names its Prometheus export has
// (redfence_do_calls_total by mode and outcome, where fn_error, such as a
// sold-out answer, is apart from failed). A request that fails for a reason
// the service does not know is answered 503 naming the servers that fail the
// same checks.
package main
