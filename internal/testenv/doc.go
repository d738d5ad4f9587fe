// Package testenv gives redfence's tests their servers: a Redis client with a
// key prefix of its own, a MySQL database of its own, and extra redis-server
// processes on loopback ports for replication and failover tests.
//
// Addresses come from REDIS_ADDR (default 127.0.0.1:6379) and MYSQL_DSN
// (default root@tcp(127.0.0.1:3306)/). When a variable is unset and nothing
// answers on the default port but a Docker engine is reachable, the server is
// started in a container with testcontainers-go, once per test process. A test
// that needs a server which does not answer fails at once with a message
// naming the variable to set; it never skips.
//
// Each server is checked once per test process, with short timeouts. When it
// is down, the first test that needs it fails with that message (one line)
// and every later one fails immediately without repeating it, so a package
// whose server is missing fails in seconds instead of spending each test's
// dial retries. The helpers also silence the global loggers of go-redis and
// the MySQL driver, whose messages (a line per failed dial) repeat what the
// returned errors already say; library code never touches them.
package testenv
