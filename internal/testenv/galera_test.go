package testenv

import (
	"errors"
	"strings"
	"testing"
)

func TestFindGaleraDepsNamesWhatIsMissing(t *testing.T) {
	all := map[string]bool{"mariadbd": true, "mariadb-install-db": true, "rsync": true, "wsrep_sst_rsync": true, "/p.so": true}
	cases := []struct {
		name    string
		without []string
		want    []string // in the error, in this order
	}{
		{"everything installed", nil, nil},
		{"no mariadbd", []string{"mariadbd"}, []string{"mariadbd (apt-get install mariadb-server)"}},
		{"no provider", []string{"/p.so"}, []string{"galera-4 provider at /p.so (apt-get install galera-4"}},
		{"no rsync", []string{"rsync"}, []string{"rsync (apt-get install rsync"}},
		{"nothing", []string{"mariadbd", "mariadb-install-db", "rsync", "wsrep_sst_rsync", "/p.so"},
			[]string{"mariadbd", "mariadb-install-db", "galera-4 provider", "rsync", "wsrep_sst_rsync"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			have := map[string]bool{}
			for k, v := range all {
				have[k] = v
			}
			for _, w := range c.without {
				delete(have, w)
			}
			look := func(n string) (string, error) {
				if have[n] {
					return "/bin/" + n, nil
				}
				return "", errors.New("not found")
			}
			stat := func(p string) error {
				if have[p] {
					return nil
				}
				return errors.New("no such file")
			}
			d, err := findGaleraDeps(look, stat, "/p.so")
			if c.want == nil {
				if err != nil || d.mariadbd != "/bin/mariadbd" || d.provider != "/p.so" || d.rsync != "/bin/rsync" {
					t.Fatalf("deps %+v, err %v", d, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error with %v missing", c.without)
			}
			msg, at := err.Error(), 0
			for _, w := range c.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error %q does not name %q (in order)", msg, w)
				}
				at += i + len(w)
			}
		})
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := freePorts(12)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
	}
}
