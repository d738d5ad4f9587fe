package redact

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

func TestRedisAddr(t *testing.T) {
	cases := []struct{ in, want string }{
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"},
		{"rediss://app:s3cret@cache.internal:6380", "rediss://app:***@cache.internal:6380"},
		{"redis://app:p@ss:w0rd@h:1/2?dial_timeout=1s", "redis://app:***@h:1/2?dial_timeout=1s"},
		{"redis://app@h:1", "redis://app@h:1"},
		{"redis://:s3cret@127.0.0.1:abc", "redis://:***@127.0.0.1:abc"}, // does not parse
		{"redis://h:1/0?x=a@b:c", "redis://h:1/0?x=a@b:c"},
	}
	for _, c := range cases {
		if got := RedisAddr(c.in); got != c.want {
			t.Errorf("RedisAddr(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDSN(t *testing.T) {
	cases := []struct{ in, want string }{
		{"root@tcp(127.0.0.1:3306)/", "root@tcp(127.0.0.1:3306)/"},
		{"app:s3cret@tcp(127.0.0.1:3306)/", "app:***@tcp(127.0.0.1:3306)/"},
		{"app:s3cret@tcp(127.0.0.1:3306)/shop?parseTime=true", "app:***@tcp(127.0.0.1:3306)/shop?parseTime=true"},
		{"app:p@ss:w/rd@tcp(h:1)/db", "app:***@tcp(h:1)/db"},
		{"app:@tcp(h:1)/db", "app:***@tcp(h:1)/db"},
		{"app:s3cret@tcp(127.0.0.1:3306)", "app:***@tcp(127.0.0.1:3306)"}, // does not parse
		{"/db", "/db"},
		{"", ""},
	}
	for _, c := range cases {
		if got := DSN(c.in); got != c.want {
			t.Errorf("DSN(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The masking finds the password the driver and go-redis find: for settings
// that parse, the masked setting has the parsed password replaced.
func TestMaskedPasswordIsTheParsedOne(t *testing.T) {
	for _, dsn := range []string{"app:p@ss@tcp(h:1)/db", "a:b:c@tcp(h:1)/", "u:x)y@unix(/tmp/s)/db"} {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := DSN(dsn); got != cfg.User+":"+Mask+strings.TrimPrefix(dsn, cfg.User+":"+cfg.Passwd) {
			t.Errorf("DSN(%q) = %q; the driver reads password %q", dsn, got, cfg.Passwd)
		}
	}
	for _, u := range []string{"redis://:p@ss@h:1/0", "redis://u:a:b@h:1"} {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		if got := RedisAddr(u); strings.Contains(got, opt.Password) {
			t.Errorf("RedisAddr(%q) = %q still holds go-redis's password %q", u, got, opt.Password)
		}
	}
}

// Errors that quote a setting, such as the URL parser's, lose the password.
func TestText(t *testing.T) {
	addr, dsn := "redis://:s3cret@127.0.0.1:abc", `app:q"zx@tcp(h:1)`
	_, uerr := redis.ParseURL(addr)
	msg := fmt.Sprintf("bad URL: %v; bad DSN %q; plain %s", uerr, dsn, dsn)
	got := Text(msg, addr, dsn, "127.0.0.1:6379", "")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "zx") {
		t.Fatalf("Text left a password in %q", got)
	}
	if !strings.Contains(got, ":***@127.0.0.1:abc") || !strings.Contains(got, `app:***@tcp(h:1)`) {
		t.Fatalf("Text = %q", got)
	}
	// A password quoted alone is masked too.
	if got := Text(`auth failed for "s3cret"`, addr); got != `auth failed for "***"` {
		t.Fatalf("Text with a password quoted alone = %q", got)
	}
	// A one-letter password masks only itself.
	if got := Text("a:b@h and a:b", "redis://a:b@h"); got != "a:***@h and a:b" {
		t.Fatalf("Text with a short password = %q", got)
	}
}

func TestWriter(t *testing.T) {
	var b strings.Builder
	w := Writer(&b, "app:s3cret@tcp(h:1)/")
	fmt.Fprintf(w, "connecting to app:s3cret@tcp(h:1)/\n")
	if got := b.String(); got != "connecting to app:***@tcp(h:1)/\n" {
		t.Fatalf("wrote %q", got)
	}
	if Writer(&b, "127.0.0.1:6379") != &b {
		t.Fatal("a writer with nothing to mask is not the writer itself")
	}
}
