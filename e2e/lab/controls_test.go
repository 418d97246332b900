// Package lab_test holds the lab's cross-chapter proofs: every naive
// version is caught because of its race or fault, not because of its code
// alone.
package lab_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/program"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// Every naive version declares its control, and every experiment is run
// by its chapter's e2e test: a test that hands the chapter's list (the
// Experiments of its lab package) to e2etest.Experiments, which runs each
// experiment as a subtest named by its Test — the guarded version, the
// naive one (it must be caught), the control (it must hold) — and compares
// them: the rows that catch the naive run must be rows the control does
// not produce (lab.SharedCatches). A naive version whose catch does not
// depend on the race (a schema finding, a row the naive code writes
// whatever the timing) fails its chapter's test, because its control is
// caught too.
//
// This test checks the wiring without running anything again: each
// chapter package already runs its experiments, so running every naive
// version and control here a second time cost the suite a minute and a
// half and proved nothing more. Run one chapter's proof with, e.g.,
// `go test -v -run '^TestExperiments$/^TestPTS01' ./e2e/points/`.
func TestEveryNaiveVersionHasAControlThatHolds(t *testing.T) {
	lists := experimentLists(t, "..")
	var without, unrun, twice, unnamed []string
	for pkg, tests := range lists {
		if len(tests) > 1 {
			twice = append(twice, fmt.Sprintf("%s.Experiments (%s)", pkg, strings.Join(tests, ", ")))
		}
	}
	names := map[string]bool{}
	naive := 0
	for _, e := range program.Experiments() {
		if e.Test == "" || names[e.Test] {
			unnamed = append(unnamed, fmt.Sprintf("%s (%q)", e.ID, e.Test))
		}
		names[e.Test] = true
		pkg := definedIn(e)
		if len(lists[pkg]) == 0 {
			unrun = append(unrun, fmt.Sprintf("%s (%s.Experiments)", e.ID, pkg))
		}
		if e.Naive == "" {
			continue
		}
		naive++
		if e.Control == "" {
			without = append(without, e.ID)
		}
	}
	if naive == 0 {
		t.Fatal("no experiment has a naive version")
	}
	// A naive version without a control proves nothing about the race:
	// every one must declare it.
	if len(without) > 0 {
		t.Errorf("naive versions without a control (%d): %s", len(without), strings.Join(without, ", "))
	}
	if len(unrun) > 0 {
		t.Errorf("experiments whose chapter's list no e2e test hands to e2etest.Experiments (%d): %s", len(unrun), strings.Join(unrun, ", "))
	}
	if len(twice) > 0 {
		t.Errorf("chapter lists run by more than one e2e test (%d): %s", len(twice), strings.Join(twice, "; "))
	}
	// Test names the subtest that runs the experiment: it must name one.
	if len(unnamed) > 0 {
		t.Errorf("experiments whose Test is empty or another's (%d): %s", len(unnamed), strings.Join(unnamed, ", "))
	}
}

// definedIn is the import path of the package that declares e's Run: its
// chapter's lab package, whose Experiments lists it.
func definedIn(e lab.Experiment) string {
	name := runtime.FuncForPC(reflect.ValueOf(e.Run).Pointer()).Name() // ".../lab/points.runConcurrentDebits"
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	if slash < 0 || dot < 0 {
		return name
	}
	return name[:slash+1+dot]
}

// experimentLists returns, for each package whose Experiments the e2e
// tests under root hand to e2etest.Experiments, those tests ("dir.TestX").
// A call with any other argument fails: its list could not be told.
func experimentLists(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		imports := map[string]string{} // the name a file uses → the import path
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = p
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isSelector(call.Fun, "e2etest", "Experiments") {
					return true
				}
				where := filepath.Base(filepath.Dir(path)) + "." + fn.Name.Name
				var list *ast.SelectorExpr
				if len(call.Args) == 2 {
					list, _ = call.Args[1].(*ast.SelectorExpr)
				}
				if list == nil || list.Sel.Name != "Experiments" {
					t.Errorf("%s: %s hands e2etest.Experiments something other than a lab package's Experiments", fset.Position(call.Pos()), where)
					return true
				}
				pkg, _ := list.X.(*ast.Ident)
				if pkg == nil || imports[pkg.Name] == "" {
					t.Errorf("%s: %s: cannot tell which package's Experiments it runs", fset.Position(call.Pos()), where)
					return true
				}
				out[imports[pkg.Name]] = append(out[imports[pkg.Name]], where)
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the e2e tests: %v", err)
	}
	return out
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
