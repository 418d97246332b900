// Package invariant is the registry of every business invariant as a query
// that returns the rows breaking it: zero rows means it holds. e2e tests call
// Assert after each experiment; `fencelab check` calls Run on a live
// database.
package invariant

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencelab/fencelab/core/pg"
)

// Invariant is one checkable statement from the spec.
type Invariant struct {
	ID        string // e.g. "PTS-I1"
	Module    string // e.g. "points"
	Chapter   string // where the book argues it
	Statement string // one line
	// Schema marks a schema invariant: it reports a guard (a constraint,
	// an index, a trigger) missing from the catalog, never a row of data.
	// A module's schema invariant is <PREFIX>-S1 beside its data
	// invariants, which report only rows: "this guard is missing" is a
	// different fact from "this balance is negative".
	Schema bool
	// SQL returns the violating rows. It must be a single SELECT (it is
	// wrapped in a LIMIT so a badly broken database cannot flood the report).
	SQL string
	// Check replaces SQL for invariants that also look outside the database
	// (e.g. blob files); it returns column names and violating rows.
	Check func(ctx context.Context, db pg.Querier) (cols []string, rows [][]any, err error)
}

// Registry is an immutable set of invariants, built from the module list
// (services.Invariants for the deployable; a test may build its own from
// one package's list).
type Registry struct {
	all []Invariant // ordered by module, then ID
}

// NewRegistry builds a registry from lists of invariants. A duplicate ID
// or an incomplete entry is an error: the lists are static, so a mistake
// shows at start-up and in every test.
func NewRegistry(lists ...[]Invariant) (*Registry, error) {
	seen := map[string]bool{}
	r := &Registry{}
	for _, l := range lists {
		for _, inv := range l {
			if inv.ID == "" || inv.Module == "" || inv.Statement == "" || (inv.SQL == "" && inv.Check == nil) {
				return nil, fmt.Errorf("invariant: incomplete entry %+v", inv)
			}
			if seen[inv.ID] {
				return nil, fmt.Errorf("invariant: duplicate ID %s", inv.ID)
			}
			seen[inv.ID] = true
			r.all = append(r.all, inv)
		}
	}
	sort.SliceStable(r.all, func(i, j int) bool {
		a, b := r.all[i], r.all[j]
		if a.Module != b.Module {
			return a.Module < b.Module
		}
		return naturalLess(a.ID, b.ID)
	})
	return r, nil
}

// MustRegistry is NewRegistry for static lists (tests, the module table).
func MustRegistry(lists ...[]Invariant) *Registry {
	r, err := NewRegistry(lists...)
	if err != nil {
		panic(err)
	}
	return r
}

// All returns the invariants ordered by module, then ID.
func (r *Registry) All() []Invariant { return append([]Invariant(nil), r.all...) }

// naturalLess orders "X-I2" before "X-I10".
func naturalLess(a, b string) bool {
	if len(a) != len(b) && strings.TrimRight(a, "0123456789") == strings.TrimRight(b, "0123456789") {
		return len(a) < len(b)
	}
	return a < b
}

// Select returns the invariants whose module or ID is in names (all when
// names is empty).
func (r *Registry) Select(names ...string) []Invariant {
	all := r.All()
	if len(names) == 0 {
		return all
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Invariant
	for _, inv := range all {
		if want[inv.Module] || want[inv.ID] {
			out = append(out, inv)
		}
	}
	return out
}

// MaxRows bounds the violating rows reported per invariant.
const MaxRows = 20

// Result is one invariant's outcome.
type Result struct {
	Invariant
	Columns []string
	Rows    [][]any // at most MaxRows
	More    bool    // more rows than reported
	Err     error   // the check itself failed (e.g. bad SQL)
}

// Holds reports whether the check ran and found nothing.
func (r Result) Holds() bool { return r.Err == nil && len(r.Rows) == 0 }

// Run checks the selected invariants (all when names is empty). It never
// stops at the first failure: the caller wants the whole picture.
func (r *Registry) Run(ctx context.Context, db pg.Querier, names ...string) []Result {
	invs := r.Select(names...)
	out := make([]Result, 0, len(invs))
	for _, inv := range invs {
		out = append(out, runOne(ctx, db, inv))
	}
	return out
}

func runOne(ctx context.Context, db pg.Querier, inv Invariant) Result {
	r := Result{Invariant: inv}
	if inv.Check != nil {
		r.Columns, r.Rows, r.Err = inv.Check(ctx, db)
	} else {
		r.Columns, r.Rows, r.Err = query(ctx, db, inv.SQL)
	}
	if len(r.Rows) > MaxRows {
		r.Rows, r.More = r.Rows[:MaxRows], true
	}
	return r
}

func query(ctx context.Context, db pg.Querier, sql string) ([]string, [][]any, error) {
	rows, err := db.Query(ctx, fmt.Sprintf("SELECT * FROM (%s) AS violation LIMIT %d", strings.TrimRight(strings.TrimSpace(sql), ";"), MaxRows+1))
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	return cols, out, err
}

// TB is the part of testing.TB that Assert needs.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

// Assert runs the selected invariants (by module or ID) and fails the test
// with a table of every violating row. Selecting nothing is itself an error:
// a typo in a module name must not make the assertion vacuous.
func (r *Registry) Assert(t TB, db pg.Querier, names ...string) {
	t.Helper()
	invs := r.Select(names...)
	if len(invs) == 0 {
		t.Errorf("invariant: no invariants registered for %v", names)
		t.FailNow()
		return
	}
	var sb strings.Builder
	for _, res := range r.Run(context.Background(), db, names...) {
		if !res.Holds() {
			Format(&sb, res)
		}
	}
	if sb.Len() > 0 {
		t.Errorf("invariants violated:\n%s", sb.String())
		t.FailNow()
	}
}

// Format writes a readable block for one result.
func Format(sb *strings.Builder, r Result) {
	fmt.Fprintf(sb, "%s [%s, %s] %s\n", r.ID, r.Module, r.Chapter, r.Statement)
	if r.Err != nil {
		fmt.Fprintf(sb, "  check failed: %v\n", r.Err)
		return
	}
	if r.Holds() {
		return
	}
	fmt.Fprintf(sb, "  %s\n", strings.Join(r.Columns, " | "))
	for _, row := range r.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(sb, "  %s\n", strings.Join(cells, " | "))
	}
	if r.More {
		fmt.Fprintf(sb, "  … more than %d rows\n", MaxRows)
	}
}

// Print writes one line per result — "ok" with the statement, or "FAIL"
// with the rows that break it (Format) — and returns how many failed. The
// benches end with it: a rate is reported only beside invariants that hold.
func Print(w io.Writer, results []Result) (failed int) {
	for _, r := range results {
		if r.Holds() {
			fmt.Fprintf(w, "  ok    %-8s %s\n", r.ID, r.Statement)
			continue
		}
		failed++
		var sb strings.Builder
		Format(&sb, r)
		fmt.Fprintf(w, "  FAIL  %s", sb.String())
	}
	return failed
}
