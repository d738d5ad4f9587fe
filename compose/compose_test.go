package compose

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// want describes what each service must look like.
type want struct {
	imagePrefix string // image name and major version, e.g. "redis:7"
	port        uint32 // published on 127.0.0.1 with the same number
	dependsOn   []string
}

var wantServices = map[string]want{
	"redis-primary":  {imagePrefix: "redis:7", port: 6379},
	"redis-replica":  {imagePrefix: "redis:7", port: 6380, dependsOn: []string{"redis-primary"}},
	"redis-sentinel": {imagePrefix: "redis:7", port: 26379, dependsOn: []string{"redis-primary", "redis-replica"}},
	"mysql":          {imagePrefix: "mysql:8", port: 3306},
}

// load parses a compose file with the specification's loader, without
// consulting the caller's environment or .env files, so the result does not
// depend on the machine. Services of the given profiles are enabled besides
// those without a profile.
func load(path string, profiles ...string) (*types.Project, error) {
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithName("redfence-check"),
		cli.WithEnv(nil),
		cli.WithProfiles(profiles),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// check returns every way the project differs from what the example and the
// tests need; nil means the file is fit.
func check(p *types.Project) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	for name := range p.Services {
		if _, ok := wantServices[name]; !ok {
			bad("unexpected service %q", name)
		}
	}
	for name, w := range wantServices {
		s, ok := p.Services[name]
		if !ok {
			bad("service %q is missing", name)
			continue
		}
		if !strings.HasPrefix(s.Image, w.imagePrefix) {
			bad("%s: image %q, want %s*", name, s.Image, w.imagePrefix)
		}
		published := false
		for _, pc := range s.Ports {
			if pc.HostIP != "127.0.0.1" {
				bad("%s: port %d published on %q, want 127.0.0.1 only", name, pc.Target, pc.HostIP)
			}
			if pc.Target == w.port && pc.Published == fmt.Sprint(w.port) && pc.HostIP == "127.0.0.1" {
				published = true
			}
		}
		if !published {
			bad("%s: port %d is not published as 127.0.0.1:%d:%d", name, w.port, w.port, w.port)
		}
		if hc := s.HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
			bad("%s: no health check", name)
		} else if !slices.ContainsFunc(hc.Test, func(a string) bool { return strings.Contains(a, fmt.Sprint(w.port)) || a == "127.0.0.1" }) {
			bad("%s: health check %q does not probe the service's port", name, hc.Test)
		}
		for _, dep := range w.dependsOn {
			d, ok := s.DependsOn[dep]
			if !ok || d.Condition != types.ServiceConditionHealthy {
				bad("%s: must depend on %s being healthy", name, dep)
			}
		}
	}
	if s, ok := p.Services["redis-replica"]; ok {
		if !strings.Contains(strings.Join(s.Command, " "), "--replicaof redis-primary 6379") {
			bad("redis-replica: command %q does not replicate redis-primary:6379", s.Command)
		}
	}
	if s, ok := p.Services["redis-sentinel"]; ok {
		script := strings.Join(append(slices.Clone(s.Entrypoint), s.Command...), " ")
		for _, frag := range []string{"sentinel monitor redfence redis-primary 6379", "--sentinel"} {
			if !strings.Contains(script, frag) {
				bad("redis-sentinel: command does not contain %q", frag)
			}
		}
	}
	if s, ok := p.Services["mysql"]; ok {
		if v := s.Environment["MYSQL_ALLOW_EMPTY_PASSWORD"]; v == nil || *v != "yes" {
			bad("mysql: MYSQL_ALLOW_EMPTY_PASSWORD must be \"yes\" (the default MYSQL_DSN is root with no password)")
		}
	}
	slices.Sort(probs)
	return probs
}

func TestComposeFileProvidesTheTestServers(t *testing.T) {
	p, err := load(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	if probs := check(p); len(probs) > 0 {
		t.Fatalf("docker-compose.yml:\n  %s", strings.Join(probs, "\n  "))
	}
}

// TestCheckRejectsBrokenFiles proves the check above can fail: each variant
// of a minimal valid file breaks one rule and must be reported.
func TestCheckRejectsBrokenFiles(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, old, new, wantProb string
	}{
		{"port on all interfaces", `"127.0.0.1:6380:6380"`, `"6380:6380"`, "redis-replica: port 6380 published on"},
		{"wrong image", "image: mysql:8.0", "image: mariadb:10.11", "mysql: image"},
		{"health check disabled", "test: [\"CMD\", \"redis-cli\", \"-p\", \"26379\", \"ping\"]", "disable: true", "redis-sentinel: no health check"},
		{"password required", `MYSQL_ALLOW_EMPTY_PASSWORD: "yes"`, `MYSQL_ROOT_PASSWORD: "secret"`, "mysql: MYSQL_ALLOW_EMPTY_PASSWORD"},
		{"service renamed", "  redis-replica:\n", "  replica:\n", `service "redis-replica" is missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(good), c.old) {
				t.Fatalf("fixture text %q not found in docker-compose.yml", c.old)
			}
			broken := strings.Replace(string(good), c.old, c.new, 1)
			path := filepath.Join(t.TempDir(), "docker-compose.yml")
			if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := load(path)
			if err != nil {
				return // the loader itself refused it: also a rejection
			}
			probs := check(p)
			if !slices.ContainsFunc(probs, func(s string) bool { return strings.Contains(s, c.wantProb) }) {
				t.Fatalf("check did not report %q; it reported %q", c.wantProb, probs)
			}
		})
	}
}

func TestLoaderRejectsInvalidYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docker-compose.yml")
	if err := os.WriteFile(path, []byte("services:\n  redis:\n    image: redis:7.0\n    ports: 6379\n    healthcheck: yes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := load(path); err == nil {
		t.Fatal("the loader accepted a file that breaks the compose schema; the check would not catch a broken docker-compose.yml")
	}
}

// galeraNodes are the services of the galera profile, in start order.
var galeraNodes = []string{"galera-1", "galera-2", "galera-3"}

// checkGalera returns every way the galera profile differs from a
// three-node MariaDB Galera Cluster that redfence's instances can write
// through (each node on 127.0.0.1:3401..3403, healthy once synced, joining
// one after the other); nil means it is fit. p must be loaded with the
// profile enabled.
func checkGalera(p *types.Project) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	for i, name := range galeraNodes {
		s, ok := p.Services[name]
		if !ok {
			bad("service %q is missing from the galera profile", name)
			continue
		}
		if !slices.Equal(s.Profiles, []string{"galera"}) {
			bad("%s: profiles %q, want [galera] (plain `docker compose up` must not start it)", name, s.Profiles)
		}
		if !strings.HasPrefix(s.Image, "mariadb:1") {
			bad("%s: image %q, want mariadb:1x (Galera ships with MariaDB)", name, s.Image)
		}
		port := fmt.Sprint(3401 + i)
		published := false
		for _, pc := range s.Ports {
			if pc.HostIP != "127.0.0.1" {
				bad("%s: port %d published on %q, want 127.0.0.1 only", name, pc.Target, pc.HostIP)
			}
			if pc.Target == 3306 && pc.Published == port && pc.HostIP == "127.0.0.1" {
				published = true
			}
		}
		if !published {
			bad("%s: port 3306 is not published as 127.0.0.1:%s", name, port)
		}
		if v := s.Environment["MARIADB_ALLOW_EMPTY_ROOT_PASSWORD"]; v == nil || *v == "" || *v == "0" {
			bad("%s: MARIADB_ALLOW_EMPTY_ROOT_PASSWORD must be set (the tests connect as root with no password)", name)
		}
		cmd := strings.Join(s.Command, " ")
		for _, frag := range []string{"--wsrep-on=ON", "--wsrep-provider=", "--wsrep-cluster-address=gcomm://galera-1,galera-2,galera-3",
			"--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--wsrep-sst-method="} {
			if !strings.Contains(cmd, frag) {
				bad("%s: command does not contain %q", name, frag)
			}
		}
		if boot := strings.Contains(cmd, "--wsrep-new-cluster"); boot != (i == 0) {
			bad("%s: --wsrep-new-cluster given=%v; exactly the first node bootstraps the cluster", name, boot)
		}
		if hc := s.HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
			bad("%s: no health check", name)
		} else if t := strings.Join(hc.Test, " "); !strings.Contains(t, "wsrep_local_state_comment") || !strings.Contains(t, "Synced") {
			bad("%s: health check %q does not wait for the node to be synced", name, hc.Test)
		}
		if i > 0 {
			prev := galeraNodes[i-1]
			if d, ok := s.DependsOn[prev]; !ok || d.Condition != types.ServiceConditionHealthy {
				bad("%s: must depend on %s being healthy (a donor serves one state transfer at a time)", name, prev)
			}
		}
	}
	slices.Sort(probs)
	return probs
}

func TestComposeGaleraProfile(t *testing.T) {
	path := filepath.Join("..", "docker-compose.yml")
	p, err := load(path, "galera")
	if err != nil {
		t.Fatalf("docker-compose.yml does not load with the galera profile: %v", err)
	}
	if probs := checkGalera(p); len(probs) > 0 {
		t.Fatalf("docker-compose.yml, galera profile:\n  %s", strings.Join(probs, "\n  "))
	}
	plain, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range galeraNodes {
		if _, ok := plain.Services[name]; ok {
			t.Errorf("%s is started without the galera profile", name)
		}
	}
}

// TestCheckGaleraRejectsBrokenProfiles proves checkGalera can fail.
func TestCheckGaleraRejectsBrokenProfiles(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, old, new, wantProb string
	}{
		{"no bootstrap", "      - --wsrep-new-cluster\n", "", "galera-1: --wsrep-new-cluster given=false"},
		{"wrong port", `"127.0.0.1:3402:3306"`, `"127.0.0.1:3412:3306"`, "galera-2: port 3306 is not published as 127.0.0.1:3402"},
		{"health check only pings", `grep -q Synced`, `true`, "does not wait for the node to be synced"},
		{"joins too early", "      galera-2:\n        condition: service_healthy", "      galera-2:\n        condition: service_started", "galera-3: must depend on galera-2 being healthy"},
		{"statement binlog", "--binlog-format=ROW", "--binlog-format=STATEMENT", `command does not contain "--binlog-format=ROW"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(good), c.old) {
				t.Fatalf("fixture text %q not found in docker-compose.yml", c.old)
			}
			broken := strings.Replace(string(good), c.old, c.new, 1)
			path := filepath.Join(t.TempDir(), "docker-compose.yml")
			if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := load(path, "galera")
			if err != nil {
				return // the loader itself refused it: also a rejection
			}
			probs := checkGalera(p)
			if !slices.ContainsFunc(probs, func(s string) bool { return strings.Contains(s, c.wantProb) }) {
				t.Fatalf("checkGalera did not report %q; it reported %q", c.wantProb, probs)
			}
		})
	}
}
