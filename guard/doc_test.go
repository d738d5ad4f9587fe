package guard_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
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
