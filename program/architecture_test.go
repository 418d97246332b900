package program_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/fencelab/fencelab"

// layers maps a package path (inside the module) to its layer, by prefix,
// as docs/DEVELOPING.md's "The layers" names them. The first match wins.
var layers = []struct{ prefix, layer string }{
	{"cmd/", "cmd"}, {"program", "cmd"}, {"e2e/", "e2e"}, {"lab/", "lab"}, {"bench/", "bench"},
	{"console", "console"}, {"services/", "services"}, {"api", "api"},
	{"core/", "core"}, {"migrations", "migrations"}, {"docs", "docs"},
}

func layerOf(t *testing.T, path string) string {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return "" // outside the module
	}
	for _, l := range layers {
		if rel == l.prefix || strings.HasPrefix(rel, l.prefix) {
			return l.layer
		}
	}
	t.Fatalf("package %s is in no layer of docs/DEVELOPING.md: add its prefix there and here", path)
	return ""
}

// arrows reads the allowed arrows from docs/DEVELOPING.md: "a -> b, c"
// lines, and "core/lab <- x, y" for who may import the lab engine.
func arrows(t *testing.T, root string) (allowed map[[2]string]bool, engine map[string]bool) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "DEVELOPING.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("<!-- BEGIN architecture arrows -->"))
	block, _, ok2 := bytes.Cut(rest, []byte("<!-- END architecture arrows -->"))
	if !ok || !ok2 {
		t.Fatal("docs/DEVELOPING.md has no architecture arrows block")
	}
	allowed, engine = map[[2]string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if from, to, ok := strings.Cut(line, "->"); ok {
			for _, l := range strings.Split(to, ",") {
				allowed[[2]string{strings.TrimSpace(from), strings.TrimSpace(l)}] = true
			}
		} else if _, by, ok := strings.Cut(line, "<-"); ok {
			for _, l := range strings.Split(by, ",") {
				engine[strings.TrimSpace(l)] = true
			}
		}
	}
	if len(allowed) == 0 || len(engine) == 0 {
		t.Fatal("the architecture arrows block lists no arrow")
	}
	return allowed, engine
}

// The diagram in docs/DEVELOPING.md is the import graph: every import
// between layers is an arrow it draws, every arrow it draws is an import,
// no arrow runs up (the arrows have no cycle), and the lab engine is
// imported only by the layers it names. It cannot drift: a new import
// across layers fails here until the diagram says so.
func TestArchitectureDiagramMatchesImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root := strings.TrimSpace(string(must(exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output())))
	allowed, engine := arrows(t, root)

	used := map[[2]string]bool{}
	var wrong []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from := layerOf(t, f[0])
		for _, imp := range f[1:] {
			to := layerOf(t, imp)
			if to == "" {
				continue
			}
			if imp == module+"/core/lab" && !strings.HasPrefix(f[0], module+"/core/lab") && !engine[from] {
				wrong = append(wrong, fmt.Sprintf("%s imports the lab engine core/lab (%s may not)", f[0], from))
			}
			if to == from {
				continue
			}
			arrow := [2]string{from, to}
			used[arrow] = true
			if !allowed[arrow] {
				wrong = append(wrong, fmt.Sprintf("%s → %s: %s imports %s", from, to, f[0], imp))
			}
		}
	}
	sort.Strings(wrong)
	for _, w := range slices.Compact(wrong) {
		t.Errorf("not in the diagram: %s", w)
	}
	for a := range allowed {
		if !used[a] {
			t.Errorf("the diagram draws %s → %s, but no package imports across it", a[0], a[1])
		}
	}
	if cycle := findCycle(allowed); cycle != nil {
		t.Errorf("the diagram's arrows make a circle: %s", strings.Join(cycle, " → "))
	}
}

// findCycle returns a cycle of the arrows, or nil.
func findCycle(arrows map[[2]string]bool) []string {
	next := map[string][]string{}
	for a := range arrows {
		next[a[0]] = append(next[a[0]], a[1])
	}
	state := map[string]int{} // 1 on the path, 2 done
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = 1
		path = append(path, n)
		for _, m := range next[n] {
			if state[m] == 1 {
				i := slices.Index(path, m)
				return append(append([]string(nil), path[i:]...), m)
			}
			if state[m] == 0 {
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = 2
		return nil
	}
	for n := range next {
		if state[n] == 0 {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// The cycle finder finds a circle and passes a chain.
func TestFindCycle(t *testing.T) {
	if c := findCycle(map[[2]string]bool{{"a", "b"}: true, {"b", "c"}: true}); c != nil {
		t.Fatalf("a chain has no cycle, got %v", c)
	}
	if c := findCycle(map[[2]string]bool{{"a", "b"}: true, {"b", "a"}: true}); len(c) != 3 {
		t.Fatalf("a → b → a is a cycle, got %v", c)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
