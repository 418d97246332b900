package faults

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryPointIsCatalogued parses every non-test Go file of the module and
// checks that each string constant named Point* (or one of this package's
// well-known names) is in Points, so `--pause-at` never refuses a real
// point nor lists a dead one.
func TestEveryPointIsCatalogued(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "peers") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) || !strings.HasPrefix(n.Name, "Point") {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						found[v] = path
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 5 {
		t.Fatalf("found only %d Point* constants under %s: the walk is broken", len(found), root)
	}
	for name, path := range found {
		if _, ok := Lookup(name); !ok {
			t.Errorf("%s declares fault point %q, missing from faults.Points", path, name)
		}
	}
	for _, name := range []string{AfterClaim, BeforeCommit, AfterBytesWritten, BeforeWrite, AfterCommit, BeforeUnlink} {
		if _, ok := Lookup(name); !ok {
			t.Errorf("well-known point %q missing from faults.Points", name)
		}
	}
	if err := CheckName("befor_write"); err == nil {
		t.Error("a misspelt point was accepted")
	}
}
