package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	_ "github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/chaos"
	"github.com/redfence/redfence/guard"
	"github.com/redfence/redfence/redislock"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		redisAddr = flag.String("redis", "127.0.0.1:6379", "Redis address")
		dsn       = flag.String("dsn", "", "MySQL DSN")
		item      = flag.String("item", "item", "item to buy (lock key)")
		prefix    = flag.String("prefix", "chaos", "redislock key prefix")
		lease     = flag.Duration("lease", time.Second, "lock lease")
		waiterTO  = flag.Duration("waiter-timeout", time.Second, "waiter timeout")
		recheck   = flag.Duration("recheck", 300*time.Millisecond, "recheck interval")
		atEnd     = flag.Bool("at-end", false, "hold the lock until the transaction ends and relay no transactions (guard.Options HandOffAtEnd, NoRelay); default: the Guard's defaults")
	)
	flag.Parse()

	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, MaxRetries: -1})
	defer rdb.Close()
	db, err := sqlx.Open("mysql", *dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	locker := redislock.New(rdb, &redislock.Options{
		Prefix: *prefix, LeaseTTL: *lease, WaiterTimeout: *waiterTO, RecheckInterval: *recheck,
	})
	defer locker.Close()

	out := &lineWriter{w: os.Stdout}
	var curOp string
	var opMu sync.Mutex
	handOff := guard.HandOffAuto
	if *atEnd {
		handOff = guard.HandOffAtEnd
	}
	g := guard.New(locker, db, &guard.Options{
		MaxAttempts:   2,
		UnlockTimeout: 2 * time.Second,
		HandOff:       handOff,
		NoRelay:       *atEnd,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: guard.Hooks{
			OnAcquired: func(_ string, token uint64, _ time.Duration) {
				opMu.Lock()
				op := curOp
				opMu.Unlock()
				out.printf("acquired %s %d", op, token)
			},
		},
	})

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	out.printf("ready")
	for line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "quit":
			return nil
		case "buy":
			if len(f) < 3 {
				return fmt.Errorf("bad command %q", line)
			}
			qty, err := strconv.Atoi(f[2])
			if err != nil {
				return fmt.Errorf("bad qty in %q", line)
			}
			wait := len(f) > 3 && f[3] == "wait"
			opMu.Lock()
			curOp = f[1]
			opMu.Unlock()
			buy(g, out, lines, *item, f[1], qty, wait)
		}
	}
	return nil
}

// buy runs one guarded buy. With wait, fn reports "infn" and blocks until
// the test says "go" (or the lock's context ends).
func buy(g *guard.Guard, out *lineWriter, lines <-chan string, item, opID string, qty int, wait bool) {
	var token uint64
	var pause func(ctx context.Context, tx *guard.Tx) error
	if wait {
		pause = func(ctx context.Context, tx *guard.Tx) error {
			var conn int64
			if err := tx.QueryRowxContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
				return err
			}
			out.printf("infn %s %d %d", opID, tx.Token(), conn)
			// Deliberately ignore ctx here: a paused process does not look
			// at anything, and the point is to see what its late writes do.
			for l := range lines {
				if strings.TrimSpace(l) == "go" {
					return nil
				}
			}
			return io.EOF
		}
	}
	out.printf("locking %s", opID)
	fn := chaos.BuyFn(item, opID, qty, pause)
	err := g.Do(context.Background(), item, func(ctx context.Context, tx *guard.Tx) error {
		token = tx.Token()
		return fn(ctx, tx)
	})
	msg := ""
	if err != nil {
		msg = strings.ReplaceAll(err.Error(), "\n", " ")
	}
	out.printf("done %s %s %d %s", opID, chaos.Classify(err), token, msg)
}

type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}
