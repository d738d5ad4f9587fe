package testenv

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

func TestChooseSource(t *testing.T) {
	cases := []struct {
		name                    string
		envSet, answers, docker bool
		want                    source
		probesDefault, probesDk bool
	}{
		{"env set wins and probes nothing", true, false, true, sourceEnv, false, false},
		{"env set even when default answers", true, true, true, sourceEnv, false, false},
		{"default answers: no Docker contact", false, true, true, sourceDefault, true, false},
		{"default answers, no Docker", false, true, false, sourceDefault, true, false},
		{"nothing answers, Docker available", false, false, true, sourceContainer, true, true},
		{"nothing answers, no Docker", false, false, false, sourceNone, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var probedDefault, probedDocker bool
			got := choose(c.envSet,
				func() bool { probedDefault = true; return c.answers },
				func() bool { probedDocker = true; return c.docker })
			if got != c.want {
				t.Fatalf("choose = %v, want %v", got, c.want)
			}
			if probedDefault != c.probesDefault || probedDocker != c.probesDk {
				t.Fatalf("probed default=%v docker=%v, want %v %v", probedDefault, probedDocker, c.probesDefault, c.probesDk)
			}
		})
	}
}

// fakeResolver counts every probe so the tests can see what resolution did.
type fakeResolver struct {
	*resolver
	dials, dockerCalls, starts int
}

func newFake(answers bool, dockerErr, startErr error) *fakeResolver {
	f := &fakeResolver{}
	f.resolver = &resolver{
		envVar:      "TESTENV_FAKE_ADDR",
		defaultAddr: "127.0.0.1:1",
		dialAddr:    "127.0.0.1:1",
		answers:     func(string) bool { f.dials++; return answers },
		docker:      func() error { f.dockerCalls++; return dockerErr },
		start: func(context.Context) (string, error) {
			f.starts++
			if startErr != nil {
				return "", startErr
			}
			return "127.0.0.1:49153", nil
		},
	}
	return f
}

func TestResolverUsesEnvWithoutProbing(t *testing.T) {
	t.Setenv("TESTENV_FAKE_ADDR", "10.0.0.9:6379")
	f := newFake(false, nil, nil)
	if got := f.get(); got != "10.0.0.9:6379" {
		t.Fatalf("get = %q", got)
	}
	if f.dials+f.dockerCalls+f.starts != 0 || f.note() != "" {
		t.Fatalf("a set variable probed: dials=%d docker=%d starts=%d note=%q", f.dials, f.dockerCalls, f.starts, f.note())
	}
}

func TestResolverKeepsAnsweringDefault(t *testing.T) {
	f := newFake(true, nil, nil)
	for range 3 {
		if got := f.get(); got != "127.0.0.1:1" {
			t.Fatalf("get = %q, want the default", got)
		}
	}
	if f.dials != 1 || f.dockerCalls != 0 || f.starts != 0 {
		t.Fatalf("dials=%d docker=%d starts=%d, want one dial and no Docker", f.dials, f.dockerCalls, f.starts)
	}
}

func TestResolverStartsOneContainer(t *testing.T) {
	f := newFake(false, nil, nil)
	for range 3 {
		if got := f.get(); got != "127.0.0.1:49153" {
			t.Fatalf("get = %q, want the container's address", got)
		}
	}
	if f.starts != 1 {
		t.Fatalf("containers started: %d, want 1 per process", f.starts)
	}
}

func TestResolverExplainsFailure(t *testing.T) {
	t.Run("no docker", func(t *testing.T) {
		f := newFake(false, errors.New("cannot connect to the Docker daemon"), nil)
		if got := f.get(); got != "127.0.0.1:1" {
			t.Fatalf("get = %q, want the default so the connection error names it", got)
		}
		if n := f.note(); !strings.Contains(n, "no Docker engine") || !strings.Contains(n, "cannot connect to the Docker daemon") {
			t.Fatalf("note = %q", n)
		}
		if f.starts != 0 {
			t.Fatal("started a container without an engine")
		}
	})
	t.Run("start fails", func(t *testing.T) {
		f := newFake(false, nil, errors.New("pull access denied"))
		if got := f.get(); got != "127.0.0.1:1" {
			t.Fatalf("get = %q", got)
		}
		if n := f.note(); !strings.Contains(n, "starting a container failed: pull access denied") {
			t.Fatalf("note = %q", n)
		}
	})
}

func TestContainerDSNSelectsNoDatabase(t *testing.T) {
	got, err := containerDSN("root:@tcp(localhost:49154)/test")
	if err != nil {
		t.Fatal(err)
	}
	if got != "root@tcp(localhost:49154)/" {
		t.Fatalf("containerDSN = %q", got)
	}
}

func TestTCPAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if !tcpAnswers(addr) {
		t.Fatalf("tcpAnswers(%s) = false for a listening port", addr)
	}
	_ = l.Close()
	if tcpAnswers(addr) {
		t.Fatalf("tcpAnswers(%s) = true for a closed port", addr)
	}
}
