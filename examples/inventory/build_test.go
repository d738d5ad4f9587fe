package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/devserver"
)

// The default build of the demo leaves the container stack out, so that a
// first go run compiles quickly; -tags containers puts it in.
func TestContainersOnlyWithTheTag(t *testing.T) {
	deps := func(tags ...string) string {
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command("go", append(args, ".")...).Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", tags, err)
		}
		return string(out)
	}
	if d := deps(); strings.Contains(d, "testcontainers") || strings.Contains(d, "github.com/moby/") {
		t.Errorf("the default build compiles the container stack:\n%s", d)
	}
	if d := deps("-tags", "containers"); !strings.Contains(d, "github.com/testcontainers/testcontainers-go\n") {
		t.Errorf("-tags containers leaves testcontainers-go out")
	}
}

// Without containers compiled in, the way that would start them says how to
// turn them on.
func TestContainerWayNamesTheTag(t *testing.T) {
	l := localLauncher()
	for _, ways := range [][]way{l.redis, l.mysql} {
		w := ways[len(ways)-1]
		err := w.available()
		if devserver.ContainersBuilt {
			if errors.Is(err, errContainersOff) {
				t.Errorf("%s: %v in a build with containers", w.name, err)
			}
			continue
		}
		if !errors.Is(err, errContainersOff) || !strings.Contains(err.Error(), "go run -tags containers ./examples/inventory") {
			t.Errorf("%s: available() = %v, want the tag named", w.name, err)
		}
	}
}
