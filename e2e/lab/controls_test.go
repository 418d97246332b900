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
	"strings"
	"testing"

	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/program"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// Every naive version declares its control, and every experiment with one
// is run by its chapter's e2e test through e2etest.Experiment, which runs
// the guarded version, the naive one (it must be caught), the control (it
// must hold) and compares them: the rows that catch the naive run must be
// rows the control does not produce (lab.SharedCatches). A naive version
// whose catch does not depend on the race (a schema finding, a row the
// naive code writes whatever the timing) fails its chapter's test, because
// its control is caught too.
//
// This test checks the wiring without running anything again: each
// chapter package already runs its experiments, so running every naive
// version and control here a second time cost the suite a minute and a
// half and proved nothing more. Run one chapter's proof with, e.g.,
// `go test ./e2e/points -run TestPTS01 -v`.
func TestEveryNaiveVersionHasAControlThatHolds(t *testing.T) {
	runs := experimentTests(t, "..")
	var without, unrun []string
	naive := 0
	for _, e := range program.Experiments() {
		if e.Naive == "" {
			continue
		}
		naive++
		if e.Control == "" {
			without = append(without, e.ID)
		}
		if !runs[e.Test] {
			unrun = append(unrun, fmt.Sprintf("%s (%s)", e.ID, e.Test))
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
		t.Errorf("naive versions whose test is not an e2e test calling e2etest.Experiment (%d): %s", len(unrun), strings.Join(unrun, ", "))
	}
}

// experimentTests returns the e2e tests under root that call
// e2etest.Experiment (by function name).
func experimentTests(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Experiment" {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == "e2etest" {
							out[fn.Name.Name] = true
						}
					}
				}
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
