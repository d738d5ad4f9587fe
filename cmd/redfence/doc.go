// Command redfence is the operator's view of redfence's state: what a lock
// holds in Redis and in the database, and the version of the fence schema.
//
//	redfence inspect [flags] KEY          holder, queue, stored token and fence row of KEY
//	redfence migrate [flags] up           create or upgrade the fence table
//	redfence migrate [flags] version      the schema version recorded in the database
//	redfence migrate [flags] down -yes    drop the fence table (every fence row with it)
//
// inspect shows the lock's holder (owner, token, lease left, acquisitions),
// the waiters in the order they will get the lock with their heartbeat
// deadlines, the stored token (every later token is larger) and the fence
// row (resource, token, owner, operation id, claims, last claim), all read
// without changing anything. The fence row of KEY is named as guard.Guard
// names it: KEY itself under the default prefix, otherwise the namespace
// (-namespace, default the prefix) followed by "{" and KEY. A -prefix other
// than the Lockers' makes a held lock look free, so when the lock has no
// state under -prefix, inspect says whether any Redis key at all starts with
// it and lists the prefixes under which KEY has state, found with SCAN over
// at most 100,000 keys each.
//
// Every subcommand takes the same flags, before or after its arguments:
//
//	-redis-addr  host:port or redis:// URL (default $REDIS_ADDR, else 127.0.0.1:6379)
//	-mysql-dsn   go-sql-driver DSN (default $MYSQL_DSN, else root@tcp(127.0.0.1:3306)/)
//	-database    database holding the fence table, instead of the DSN's
//	-prefix      the Lockers' redislock.Options.Prefix (default redfence)
//	-namespace   the Guards' guard.Options.Namespace (default from -prefix)
//	-json        one JSON document on stdout, also for errors
//	-timeout     bound on the whole command (default 30s)
//
// Exit status, the same for the inventory example (examples/inventory): 0
// done; 1 failed (a server answered with an error or refused the
// credentials, a dirty schema); 2 bad usage (flags, arguments, key, a Redis
// address or DSN that does not parse); 3 a server did not answer (the
// message names which, and the flag or variable to fix).
package main
