package errs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The library's packages combine errors with Join, never errors.Join, whose
// message spans several lines.
func TestPackagesUseJoin(t *testing.T) {
	for _, dir := range []string{"redislock", "fence", "guard"} {
		path := filepath.Join("..", "..", dir)
		entries, err := os.ReadDir(path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			n++
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(path, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(node ast.Node) bool {
				sel, ok := node.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Join" {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "errors" {
					t.Errorf("%s: errors.Join prints on several lines; use internal/errs.Join", fset.Position(sel.Pos()))
				}
				return true
			})
		}
		if n == 0 {
			t.Fatalf("no Go files in %s", path)
		}
	}
}
