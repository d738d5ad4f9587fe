package devserver

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// assertGone checks that p left nothing behind: no process, no listener, and
// no directory when it owned one.
func assertGone(t *testing.T, name string, pid int, addr, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
		t.Errorf("%s: process %d still exists", name, pid)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("%s: %s still accepts connections", name, addr)
	}
	if dir != "" {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: directory %s still exists (%v)", name, dir, err)
		}
	}
}

func TestRedisStartsAnswersAndCloses(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	p, err := StartRedis(testCtx(t), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pingRedis(testCtx(t), p.Addr); err != nil {
		t.Fatalf("PING after start: %v", err)
	}
	pid, dir := p.Pid(), p.Dir
	if pid == 0 || filepath.Dir(dir) != os.Getenv("TMPDIR") {
		t.Fatalf("pid %d, dir %s", pid, dir)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, "redis-server", pid, p.Addr, dir)
	if p.Pid() != pid {
		t.Errorf("Pid changed after Close")
	}
	p.Kill() // a second stop is harmless
}

func TestRedisKeepsAGivenDirectory(t *testing.T) {
	dir := t.TempDir()
	p, err := StartRedis(testCtx(t), RedisOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "redis.log")); err != nil {
		t.Fatalf("the caller's directory lost the log: %v", err)
	}
}

// TestRedisWithAPasswordIsReady: a server that asks for a password before
// PING is up, not starting.
func TestRedisWithAPasswordIsReady(t *testing.T) {
	p, err := StartRedis(testCtx(t), RedisOptions{Dir: t.TempDir(), Args: []string{"--requirepass", "sekrit"}, ReadyTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
}

// TestRedisOnATakenPortSaysSo: a server that cannot bind the port it was
// given fails at once, saying that it exited, rather than waiting out its
// ready timeout.
func TestRedisOnATakenPortSaysSo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = StartRedis(testCtx(t), RedisOptions{Dir: t.TempDir(), Port: port})
	if !errors.Is(err, errExited) {
		t.Fatalf("start on a taken port: %v, want the process to have exited", err)
	}
}

func TestMariaDBStartsWithRootAndCloses(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p, err := StartMariaDB(testCtx(t), MariaDBOptions{})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", RootDSN(p.Addr))
	if err != nil {
		t.Fatal(err)
	}
	var v string
	err = db.QueryRowContext(testCtx(t), "SELECT VERSION()").Scan(&v)
	_ = db.Close()
	if err != nil {
		t.Fatalf("root with an empty password over TCP: %v", err)
	}
	t.Logf("MariaDB %s on %s", v, p.Addr)
	pid, dir := p.Pid(), p.Dir
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, "mariadbd", pid, p.Addr, dir)
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
	if left := procsMentioning(t, tmp); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

// TestMariaDBStartCancelled: a start given up while mariadb-install-db has
// its bootstrap server running ends both at once and removes the directory.
func TestMariaDBStartCancelled(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	seen := make(chan struct{})
	var cancelled time.Time // written before seen is closed
	go func() {
		defer cancel()
		for ctx.Err() == nil {
			for _, p := range procsMentioning(t, tmp) {
				if strings.Contains(p, "--bootstrap") {
					cancelled = time.Now()
					close(seen)
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	p, err := StartMariaDB(ctx, MariaDBOptions{})
	if err == nil {
		_ = p.Close()
		t.Fatal("the start was not cancelled")
	}
	select {
	case <-seen:
	default:
		t.Fatalf("the bootstrap server was never seen running; StartMariaDB: %v", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("StartMariaDB cancelled: %v", err)
	}
	// Killing the install script alone would leave its bootstrap server to
	// finish the install (seconds) with the directory in use.
	if d := time.Since(cancelled); d > time.Second {
		t.Errorf("returned %v after its ctx ended", d)
	}
	if left := procsMentioning(t, tmp); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
}

func TestLookFindsInstalledServers(t *testing.T) {
	if _, err := LookRedis(); err != nil {
		t.Fatal(err)
	}
	b, err := LookMariaDB()
	if err != nil {
		t.Fatal(err)
	}
	if b.Server != "/usr/sbin/mariadbd" {
		return // installed elsewhere: the case below does not apply
	}
	// Debian's mariadbd is in /usr/sbin, not on an ordinary user's PATH.
	t.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
	if b2, err := LookMariaDB(); err != nil || b2.Server != b.Server {
		t.Fatalf("with a user's PATH: %+v %v, want %+v", b2, err, b)
	}
}

func TestLookNamesWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := LookRedis(); err == nil || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Fatalf("LookRedis on an empty PATH: %v", err)
	}
	_, err := LookMariaDB()
	if b, _ := LookMariaDB(); b.InstallDB != "" {
		return // mariadb-install-db is in an sbin directory here
	}
	if err == nil || !strings.Contains(err.Error(), "apt-get install mariadb-server") {
		t.Fatalf("LookMariaDB on an empty PATH: %v", err)
	}
}

func TestAdminDSN(t *testing.T) {
	got, err := AdminDSN("root:@tcp(localhost:49154)/test")
	if err != nil || got != "root@tcp(localhost:49154)/" {
		t.Fatalf("AdminDSN = %q, %v", got, err)
	}
	if _, err := AdminDSN("not a dsn"); err == nil {
		t.Fatal("AdminDSN accepted a malformed DSN")
	}
	if RootDSN("127.0.0.1:1") != "root@tcp(127.0.0.1:1)/" {
		t.Fatalf("RootDSN = %q", RootDSN("127.0.0.1:1"))
	}
}
