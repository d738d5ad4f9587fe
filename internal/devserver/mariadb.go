package devserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDBBins are the binaries [StartMariaDB] runs.
type MariaDBBins struct {
	Server    string // mariadbd
	InstallDB string // mariadb-install-db, which creates the system tables
}

// sbinDirs are searched after PATH: Debian installs mariadbd in /usr/sbin,
// which is not on an ordinary user's PATH.
var sbinDirs = []string{"/usr/sbin", "/usr/local/sbin"}

// LookMariaDB finds mariadbd and mariadb-install-db on PATH or in the sbin
// directories, or returns an error saying how to install them.
func LookMariaDB() (MariaDBBins, error) {
	var b MariaDBBins
	var errs []error
	var err error
	if b.Server, err = look("mariadbd"); err != nil {
		errs = append(errs, err)
	}
	if b.InstallDB, err = look("mariadb-install-db", "mysql_install_db"); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return b, fmt.Errorf("devserver: MariaDB is not installed (apt-get install mariadb-server, brew install mariadb): %w", errors.Join(errs...))
	}
	return b, nil
}

// look returns the first of names found on PATH or in sbinDirs.
func look(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, d := range sbinDirs {
			p := filepath.Join(d, n)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %v", names[0], sbinDirs)
}

// MariaDBOptions configures [StartMariaDB].
type MariaDBOptions struct {
	// Bins are the binaries to run. default: [LookMariaDB]
	Bins MariaDBBins
	// Dir receives the data directory, the log and the socket; it must exist
	// and its path be short enough for a Unix socket (about 100 bytes).
	// default: a new temporary directory, removed by [Process.Close]
	Dir string
	// Port to listen on. default: 0, a free port, with a new one tried when
	// another program takes it first
	Port int
	// ReadyTimeout bounds the wait for the first connection, after the
	// system tables are created. default: 30s
	ReadyTimeout time.Duration
}

// Sizes that keep a throwaway server small and quick to create; the install
// and the server must agree on them.
var mariadbSizing = []string{
	"--innodb-log-file-size=8M",
	"--innodb-data-file-path=ibdata1:10M:autoextend",
	"--innodb-buffer-pool-size=64M",
}

// StartMariaDB creates a MariaDB data directory whose root user has an empty
// password (mariadb-install-db), starts mariadbd on 127.0.0.1 only and
// returns once root can connect; [RootDSN] of its Addr reaches it. Durability
// is relaxed: the data is meant to be thrown away. ctx bounds the start; the
// server then runs until [Process.Kill] or [Process.Close].
func StartMariaDB(ctx context.Context, opt MariaDBOptions) (*Process, error) {
	if opt.Bins.Server == "" || opt.Bins.InstallDB == "" {
		bins, err := LookMariaDB()
		if err != nil {
			return nil, err
		}
		opt.Bins = bins
	}
	if opt.ReadyTimeout <= 0 {
		opt.ReadyTimeout = 30 * time.Second
	}
	dir, own, err := newDir(opt.Dir, "rf-mariadb-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	logPath := filepath.Join(dir, "error.log")
	// mariadbd refuses to run as root unless told to.
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"}
	}
	p := &Process{Name: "mariadbd", Dir: dir, Port: opt.Port, own: own, spec: spec{
		bin: opt.Bins.Server,
		args: func(port int) []string {
			args := []string{"--no-defaults",
				"--datadir=" + data,
				"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-name-resolve",
				"--socket=" + filepath.Join(dir, "mysqld.sock"),
				"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
				"--log-error=" + logPath,
				"--innodb-flush-log-at-trx-commit=2",
			}
			args = append(args, mariadbSizing...)
			return append(args, asRoot...)
		},
		ready:        pingMariaDB,
		readyTimeout: opt.ReadyTimeout,
		logPath:      logPath,
	}}
	if err := installMariaDB(ctx, opt.Bins.InstallDB, data, asRoot); err != nil {
		_ = p.Close()
		return nil, err
	}
	if err := p.start(ctx, opt.Port != 0); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// installMariaDB creates the system tables in data; root may log in over TCP
// with an empty password.
func installMariaDB(ctx context.Context, bin, data string, asRoot []string) error {
	args := []string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}
	args = append(args, mariadbSizing...)
	args = append(args, asRoot...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	// The install script starts mariadbd --bootstrap: a cancelled ctx must
	// end both, hence the whole group.
	cmd.Cancel = func() error { killGroup(cmd.Process); return nil }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("devserver: %s: %w", filepath.Base(bin), ctx.Err())
		}
		s := string(out)
		if len(s) > 2000 {
			s = "..." + s[len(s)-2000:]
		}
		return fmt.Errorf("devserver: %s: %w\n%s", filepath.Base(bin), err, s)
	}
	return nil
}

// RootDSN is the DSN of root, with an empty password and no database
// selected, on the MariaDB server at addr.
func RootDSN(addr string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = addr
	return cfg.FormatDSN()
}

// pingMariaDB opens one connection as root and closes it; no pool is
// created, so polling leaves nothing behind.
func pingMariaDB(ctx context.Context, addr string) error {
	cfg, err := mysql.ParseDSN(RootDSN(addr))
	if err != nil {
		return err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	c, err := conn.Connect(ctx)
	if err != nil {
		return err
	}
	return c.Close()
}
