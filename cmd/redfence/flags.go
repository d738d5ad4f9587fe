package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redfence/redfence/internal/redact"
	"github.com/redfence/redfence/redislock"
)

// Defaults shared with the test suite (internal/testenv) and docker-compose.yml.
const (
	defaultRedisAddr = "127.0.0.1:6379"
	defaultMySQLDSN  = "root@tcp(127.0.0.1:3306)/"
)

// config holds the flags every subcommand takes.
type config struct {
	redisAddr string
	mysqlDSN  string
	database  string
	prefix    string
	namespace string
	json      bool
	timeout   time.Duration

	// Where redisAddr and mysqlDSN came from, for error messages.
	redisFrom, dsnFrom string
}

// newFlagSet returns the flag set of subcommand name with the common flags
// bound to c; usageLine heads its help.
func newFlagSet(name, usageLine string, c *config, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("redfence "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.redisAddr, c.redisFrom = fromEnv("REDIS_ADDR", defaultRedisAddr)
	c.mysqlDSN, c.dsnFrom = fromEnv("MYSQL_DSN", defaultMySQLDSN)
	fs.StringVar(&c.redisAddr, "redis-addr", c.redisAddr, "Redis `address` (host:port or redis:// URL); default $REDIS_ADDR, else "+defaultRedisAddr)
	fs.StringVar(&c.mysqlDSN, "mysql-dsn", c.mysqlDSN, "MySQL `DSN` (go-sql-driver format); default $MYSQL_DSN, else "+defaultMySQLDSN)
	// The defaults come from the environment: help shows them without the
	// password.
	fs.Lookup("redis-addr").DefValue = redact.RedisAddr(c.redisAddr)
	fs.Lookup("mysql-dsn").DefValue = redact.DSN(c.mysqlDSN)
	fs.StringVar(&c.database, "database", "", "`name` of the database holding the fence table (default: the DSN's)")
	fs.StringVar(&c.prefix, "prefix", redislock.DefaultPrefix, "lock key `prefix` (redislock.Options.Prefix)")
	fs.StringVar(&c.namespace, "namespace", "", "fence row `namespace` (guard.Options.Namespace); default: -prefix, or none when it is "+redislock.DefaultPrefix)
	fs.BoolVar(&c.json, "json", false, "print one JSON document on stdout, also for errors")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on the whole command")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redfence %s\n\nflags:\n", usageLine)
		fs.PrintDefaults()
	}
	return fs
}

// fromEnv returns the variable's value and its name, or def and "the default".
func fromEnv(name, def string) (value, from string) {
	if v := os.Getenv(name); v != "" {
		return v, "$" + name
	}
	return def, "the default"
}

// parse parses args with flags allowed before, between and after the
// positional arguments, which it returns ("--" ends the flags). Flags that
// were set explicitly update the source recorded in c.
func parse(fs *flag.FlagSet, c *config, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			c.json = c.json || wantsJSON(args)
			return nil, &cliError{code: exitUsage, err: err}
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "redis-addr":
			c.redisFrom = "-redis-addr"
		case "mysql-dsn":
			c.dsnFrom = "-mysql-dsn"
		}
	})
	if c.timeout <= 0 {
		return nil, usageErrorf("-timeout must be positive")
	}
	return pos, nil
}

// wantsJSON reports whether args ask for -json, for reporting an error found
// before the flag itself was parsed.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-json", "--json", "-json=true", "--json=true":
			return true
		}
	}
	return false
}
