package chaos

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// scenarioName finds the names scenarios give their summary lines.
var scenarioName = regexp.MustCompile(`(?:newEnv|newLostGrant|runRides)\(t, "([a-z0-9-]+)"|name: "([a-z0-9-]+)"|"(redis-outage)-"`)

// TestDocNamesEveryScenario keeps the package documentation's list of
// scenarios complete: every name a scenario file gives its summary line must
// appear in doc.go, with its file.
func TestDocNamesEveryScenario(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("scenario_*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files (%v)", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), f) {
			t.Errorf("doc.go does not name %s", f)
		}
		names := 0
		for _, m := range scenarioName.FindAllStringSubmatch(string(src), -1) {
			name := m[1] + m[2] + m[3]
			if name == "" || (m[2] != "" && !strings.Contains(string(src), "t: t, name: \""+name)) {
				continue
			}
			names++
			if !strings.Contains(string(doc), name) {
				t.Errorf("doc.go does not name scenario %s (%s)", name, f)
			}
		}
		if names == 0 {
			t.Errorf("%s: no scenario name found; teach this test how it names its summary", f)
		}
	}
}
