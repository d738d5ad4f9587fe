package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// GaleraSize is the number of nodes of a cluster started by [StartGalera].
const GaleraSize = 3

// Galera is a MariaDB Galera Cluster of [GaleraSize] mariadbd processes on
// free loopback ports, each node writable (multi-primary), with its files in
// a temporary directory. Stop ends every process and removes the directory.
type Galera struct {
	// Nodes are the cluster's nodes; Nodes[0] bootstrapped it.
	Nodes []*GaleraNode
	// Name is the cluster name (wsrep_cluster_name), unique per start.
	Name string

	dir        string
	deps       galeraDeps
	cred       *syscall.Credential // run mariadbd as the mysql user when root
	standalone bool                // one server with wsrep off (StartGaleraStandalone)
}

// GaleraNode is one mariadbd process of a [Galera] cluster.
type GaleraNode struct {
	Name string // node1, node2, node3
	// Addr is the node's SQL address, 127.0.0.1:port.
	Addr string
	// GroupPort is the Galera replication port (base_port); ISTPort and
	// SSTPort receive incremental and full state transfers.
	GroupPort, ISTPort, SSTPort int

	c    *Galera
	dir  string // the node's directory: data/, error.log, socket, pid file
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// galeraDeps are the installed pieces a cluster needs.
type galeraDeps struct {
	mariadbd, installDB, provider, rsync string
}

// DefaultGaleraProvider is where Debian's galera-4 package installs the
// wsrep provider; GALERA_PROVIDER overrides it.
const DefaultGaleraProvider = "/usr/lib/galera/libgalera_smm.so"

// galeraPieces lists what a cluster needs, with how to get each.
var galeraPieces = []struct {
	name, install string
}{
	{"mariadbd", "apt-get install mariadb-server"},
	{"mariadb-install-db", "apt-get install mariadb-server"},
	{"galera-4 provider", "apt-get install galera-4"},
	{"rsync", "apt-get install rsync (Galera's state transfer uses it)"},
	{"wsrep_sst_rsync", "apt-get install mariadb-server"},
}

// findGaleraDeps locates the binaries and the provider with lookPath and
// stat, returning an error that names every missing piece and how to
// install it.
func findGaleraDeps(lookPath func(string) (string, error), stat func(string) error, provider string) (galeraDeps, error) {
	var d galeraDeps
	var missing []string
	find := func(i int, names ...string) string {
		for _, n := range names {
			if p, err := lookPath(n); err == nil {
				return p
			}
		}
		missing = append(missing, galeraPieces[i].name+" ("+galeraPieces[i].install+")")
		return ""
	}
	d.mariadbd = find(0, "mariadbd", "/usr/sbin/mariadbd")
	d.installDB = find(1, "mariadb-install-db", "mysql_install_db")
	if err := stat(provider); err != nil {
		missing = append(missing, galeraPieces[2].name+" at "+provider+" ("+galeraPieces[2].install+", or set GALERA_PROVIDER)")
	} else {
		d.provider = provider
	}
	d.rsync = find(3, "rsync")
	find(4, "wsrep_sst_rsync")
	if len(missing) > 0 {
		return d, fmt.Errorf("testenv: a Galera cluster needs %s", strings.Join(missing, ", "))
	}
	return d, nil
}

func galeraProvider() string {
	if p := os.Getenv("GALERA_PROVIDER"); p != "" {
		return p
	}
	return DefaultGaleraProvider
}

func statFile(p string) error {
	_, err := os.Stat(p)
	return err
}

// GaleraProviderOptions are the wsrep provider options of every node, besides
// the ports. Failure detection is faster than Galera's defaults (a node that
// stops answering is dropped from the primary component after about 3 s
// instead of 5 to 15 s) so that fault tests stay short, and the write-set
// cache is small.
const GaleraProviderOptions = "gcache.size=32M;evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;" +
	"evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT6S"

// StartGalera starts a three-node cluster on free loopback ports and returns
// once every node is synced and the cluster has all three members (about 10
// to 15 s). Node 1 is initialised with mariadb-install-db and bootstraps the
// cluster; nodes 2 and 3 join it one after the other and receive its state
// by rsync (SST). Every node allows root from 127.0.0.1 with an empty
// password. Run as root, the nodes run as the mysql user (rsync's daemon
// would otherwise drop to nobody and fail the state transfer).
//
// The processes are stopped with Stop, and also die with the test process
// (parent-death signal), so a panicking test leaves none behind. Errors name
// the missing piece when mariadbd, mariadb-install-db, the galera-4 provider
// or rsync is not installed, and carry the end of a node's error log when a
// node does not come up.
func StartGalera(ctx context.Context) (*Galera, error) {
	deps, err := findGaleraDeps(exec.LookPath, statFile, galeraProvider())
	if err != nil {
		return nil, err
	}
	return startWithRetry(ctx, deps, false)
}

// StartGaleraStandalone starts one mariadbd with the settings of a cluster
// node but without wsrep: the single server a cluster is compared with. Its
// Nodes holds that one server; Stop stops it.
func StartGaleraStandalone(ctx context.Context) (*Galera, error) {
	deps, err := findGaleraDeps(exec.LookPath, statFile, galeraProvider())
	if err != nil {
		return nil, err
	}
	return startWithRetry(ctx, deps, true)
}

// startWithRetry starts again once when the first start fails (a port taken
// between choosing it and binding it).
func startWithRetry(ctx context.Context, deps galeraDeps, standalone bool) (*Galera, error) {
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		c, err := startGalera(ctx, deps, standalone)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startGalera(ctx context.Context, deps galeraDeps, standalone bool) (c *Galera, err error) {
	c = &Galera{Name: "rftest-" + RandomHex(4), deps: deps, standalone: standalone}
	size := GaleraSize
	if standalone {
		size = 1
	}
	if c.dir, err = os.MkdirTemp("", "redfence-galera-"); err != nil {
		return nil, fmt.Errorf("testenv: galera: %w", err)
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	// The nodes may run as another user: they must reach their directories.
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("testenv: galera: %w", err)
	}
	if os.Geteuid() == 0 {
		if c.cred, err = mysqlCredential(); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(4 * size)
	if err != nil {
		return nil, fmt.Errorf("testenv: galera: %w", err)
	}
	var members []string
	for i := range size {
		n := &GaleraNode{
			c: c, Name: "node" + strconv.Itoa(i+1),
			Addr:      net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[4*i])),
			GroupPort: ports[4*i+1], ISTPort: ports[4*i+2], SSTPort: ports[4*i+3],
		}
		n.dir = filepath.Join(c.dir, n.Name)
		if err := os.MkdirAll(filepath.Join(n.dir, "data"), 0o755); err != nil {
			return nil, fmt.Errorf("testenv: galera: %w", err)
		}
		members = append(members, "127.0.0.1:"+strconv.Itoa(n.GroupPort))
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		n.args = n.serverArgs("gcomm://" + strings.Join(members, ","))
	}
	if err := c.initData(ctx, c.Nodes[0]); err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := c.chown(n.dir); err != nil {
			return nil, err
		}
	}
	if err := c.Nodes[0].start(ctx, !standalone); err != nil {
		return nil, err
	}
	// A donor serves one full state transfer at a time: join one by one.
	for _, n := range c.Nodes[1:] {
		if err := n.start(ctx, false); err != nil {
			return nil, err
		}
	}
	if err := c.WaitSynced(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// mysqlCredential is the mysql user created by the mariadb-server package.
func mysqlCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("testenv: galera: running as root needs the mysql user (apt-get install mariadb-server), or run as another user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("testenv: galera: mysql user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// chown gives dir and everything under it to the user the nodes run as.
func (c *Galera) chown(dir string) error {
	if c.cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.cred.Uid), int(c.cred.Gid))
	})
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("no free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// initData creates the system tables of n's data directory; the other nodes
// receive them with their first state transfer.
func (c *Galera) initData(ctx context.Context, n *GaleraNode) error {
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(n.dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db"}
	if c.cred != nil {
		args = append(args, "--user=mysql")
	}
	cmd := exec.CommandContext(ctx, c.deps.installDB, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testenv: galera: %s: %w\n%s", c.deps.installDB, err, tail(string(out), 2000))
	}
	return nil
}

func (n *GaleraNode) serverArgs(members string) []string {
	opts := fmt.Sprintf("base_port=%d;gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;%s",
		n.GroupPort, n.GroupPort, n.ISTPort, GaleraProviderOptions)
	_, port, _ := net.SplitHostPort(n.Addr)
	args := []string{
		"--no-defaults",
		"--datadir=" + filepath.Join(n.dir, "data"),
		"--port=" + port, "--bind-address=127.0.0.1", "--skip-name-resolve",
		"--socket=" + filepath.Join(n.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(n.dir, "error.log"),
		"--max-connections=400",
		"--innodb-buffer-pool-size=64M",
		"--innodb-flush-log-at-trx-commit=2",
		"--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--default-storage-engine=InnoDB",
	}
	if n.c.standalone {
		return args
	}
	return append(args,
		"--wsrep-on=ON",
		"--wsrep-provider="+n.c.deps.provider,
		"--wsrep-cluster-name="+n.c.Name,
		"--wsrep-cluster-address="+members,
		"--wsrep-node-name="+n.Name,
		"--wsrep-node-address=127.0.0.1:"+strconv.Itoa(n.GroupPort),
		"--wsrep-sst-method=rsync",
		"--wsrep-sst-receive-address=127.0.0.1:"+strconv.Itoa(n.SSTPort),
		"--wsrep-provider-options="+opts,
	)
}

// start runs the node's mariadbd and waits until it is synced with the
// cluster (or, bootstrapping, until it is the primary component).
func (n *GaleraNode) start(ctx context.Context, bootstrap bool) error {
	args := n.args
	if bootstrap {
		args = append(append([]string{}, args...), "--wsrep-new-cluster")
	}
	cmd := exec.Command(n.c.deps.mariadbd, args...)
	// Pdeathsig is set after the credentials change, so it survives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: n.c.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: galera: start %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	wait := n.waitSynced
	if n.c.standalone {
		wait = n.waitAnswers
	}
	if err := wait(sctx, done); err != nil {
		return fmt.Errorf("testenv: galera: %s (%s) did not become ready: %w\n--- end of %s ---\n%s",
			n.Name, n.Addr, err, n.LogPath(), n.LogTail(3000))
	}
	return nil
}

// Start starts a node stopped with Kill again, with its data directory as
// the crash left it, and waits until it has rejoined the cluster and is
// synced (it receives what it missed by IST or SST).
func (n *GaleraNode) Start(ctx context.Context) error {
	n.mu.Lock()
	running := n.cmd != nil
	n.mu.Unlock()
	if running {
		return fmt.Errorf("testenv: galera: %s is running", n.Name)
	}
	return n.start(ctx, false)
}

// Kill stops the node with SIGKILL, as a crash would, and waits for the
// process (and any state-transfer helper it started) to exit. It is safe to
// call on a stopped node.
func (n *GaleraNode) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd, n.done = nil, nil
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Running reports whether the node's process is running.
func (n *GaleraNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// DSN returns a DSN for root on the node with database db selected (none
// when db is empty).
func (n *GaleraNode) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = n.Addr
	cfg.DBName = db
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

// LogPath is the node's error log.
func (n *GaleraNode) LogPath() string { return filepath.Join(n.dir, "error.log") }

// LogTail returns at most the last max bytes of the node's error log.
func (n *GaleraNode) LogTail(max int) string {
	b, err := os.ReadFile(n.LogPath())
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return tail(string(b), max)
}

func tail(s string, max int) string {
	if len(s) > max {
		return "..." + s[len(s)-max:]
	}
	return s
}

// Isolate cuts the node off from the other nodes (Galera's gmcast.isolate:
// its group connections are closed and new ones refused) until Rejoin. The
// node drops out of the primary component once the others stop hearing
// from it (evs.suspect_timeout); from then on it refuses queries with
// error 1047 (WSREP has not yet prepared node for application use).
func (n *GaleraNode) Isolate(ctx context.Context) error {
	return n.exec(ctx, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")
}

// Rejoin ends Isolate and waits until the node is synced with the cluster
// again.
func (n *GaleraNode) Rejoin(ctx context.Context) error {
	if err := n.exec(ctx, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'"); err != nil {
		return err
	}
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	return n.waitSynced(ctx, done)
}

func (n *GaleraNode) exec(ctx context.Context, q string) error {
	db, err := sql.Open("mysql", n.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("testenv: galera: %s: %s: %w", n.Name, q, err)
	}
	return nil
}

// SetGlobal sets a global server variable on the node (SET GLOBAL name =
// value), e.g. wsrep_log_conflicts. A restarted node starts without it.
func (n *GaleraNode) SetGlobal(ctx context.Context, name, value string) error {
	return n.exec(ctx, "SET GLOBAL "+name+" = "+value)
}

// Status returns the node's wsrep status variables whose names are given
// (wsrep_ prefix included), e.g. wsrep_cluster_status, wsrep_ready.
func (n *GaleraNode) Status(ctx context.Context, names ...string) (map[string]string, error) {
	db, err := sql.Open("mysql", n.DSN(""))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	out := map[string]string{}
	for _, name := range names {
		var k, v string
		if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// Synced reports whether the node is a synced member of a primary
// component of the full size.
func (n *GaleraNode) Synced(ctx context.Context) bool {
	st, err := n.Status(ctx, "wsrep_local_state_comment", "wsrep_cluster_status", "wsrep_cluster_size", "wsrep_ready")
	return err == nil && st["wsrep_local_state_comment"] == "Synced" && st["wsrep_cluster_status"] == "Primary" &&
		st["wsrep_ready"] == "ON" && st["wsrep_cluster_size"] == strconv.Itoa(len(n.c.Nodes))
}

// waitSynced polls until the node is Synced in the primary component (of
// any size: while nodes join one by one the cluster is smaller).
func (n *GaleraNode) waitSynced(ctx context.Context, exited <-chan struct{}) error {
	var last error
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := n.Status(qctx, "wsrep_local_state_comment", "wsrep_cluster_status", "wsrep_ready")
		cancel()
		switch {
		case err != nil:
			last = err
		case st["wsrep_local_state_comment"] == "Synced" && st["wsrep_cluster_status"] == "Primary" && st["wsrep_ready"] == "ON":
			return nil
		default:
			last = fmt.Errorf("state %s, cluster %s, ready %s", st["wsrep_local_state_comment"], st["wsrep_cluster_status"], st["wsrep_ready"])
		}
		select {
		case <-exited:
			return fmt.Errorf("mariadbd exited (last check: %v)", last)
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitAnswers polls until the server answers a query.
func (n *GaleraNode) waitAnswers(ctx context.Context, exited <-chan struct{}) error {
	db, err := sql.Open("mysql", n.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(qctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("mariadbd exited (last check: %v)", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitSynced waits until every node is running, synced and sees a cluster of
// all the nodes.
func (c *Galera) WaitSynced(ctx context.Context) error {
	if c.standalone {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		all := true
		for _, n := range c.Nodes {
			if !n.Running() || !n.Synced(ctx) {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			var b strings.Builder
			for _, n := range c.Nodes {
				st, err := n.Status(context.Background(), "wsrep_local_state_comment", "wsrep_cluster_size", "wsrep_cluster_status")
				fmt.Fprintf(&b, "\n%s running=%v %v %v", n.Name, n.Running(), st, err)
			}
			return fmt.Errorf("testenv: galera: cluster not synced: %w%s", ctx.Err(), b.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop kills every node and removes the cluster's directory. It is safe to
// call more than once.
func (c *Galera) Stop() {
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
		c.dir = ""
	}
}
