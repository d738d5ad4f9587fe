package guard_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxPackageDocWords bounds the package documentation, what `go doc` shows
// before the index: how to use Do, read in one screen. How Do works belongs
// in the design note it links to.
const maxPackageDocWords = 600

const designNote = "docs/design.md"

func TestPackageDocIsShortAndLinksTheDesignNote(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			text.WriteString(f.Doc.Text())
		}
	}
	doc := text.String()
	if n := len(strings.Fields(doc)); n > maxPackageDocWords {
		t.Errorf("the package documentation has %d words, more than %d: keep it to how to use the package, "+
			"and move how it works to %s", n, maxPackageDocWords, designNote)
	}
	if !strings.Contains(doc, designNote) {
		t.Errorf("the package documentation does not link the design note %s", designNote)
	}
	if _, err := os.Stat(filepath.Join("..", designNote)); err != nil {
		t.Errorf("the design note the package documentation links: %v", err)
	}
}

// The package documentation's "How a Do runs" names the files of a call in
// order; each of them exists, and every file of the package opens with a
// comment saying what it owns.
func TestEveryFileSaysWhatItOwns(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	i := strings.Index(doc, "// # How a Do runs")
	if i < 0 {
		t.Fatal(`the package documentation has no "How a Do runs" section`)
	}
	section := doc[i:]
	if j := strings.Index(section[1:], "// #"); j >= 0 {
		section = section[:j+1]
	}
	named := regexp.MustCompile(`\b[a-z_]+\.go\b`).FindAllString(section, -1)
	if len(named) < 8 {
		t.Fatalf("the section names %d files: %v", len(named), named)
	}
	for _, name := range named {
		if _, err := os.Stat(name); err != nil {
			t.Errorf("the section names %s: %v", name, err)
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "doc.go" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "package guard\n\n// "+name+" owns ") {
			t.Errorf("%s does not open with a comment %q", name, "// "+name+" owns ...")
		}
	}
}
