// Package lab_test holds the lab's cross-chapter proofs: every naive
// version is caught because of its race or fault, not because of its code
// alone.
package lab_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/e2e/e2etest"
	"github.com/fencelab/fencelab/program"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// For every naive version that declares its control, the naive run must
// be caught and the control must hold — and the rows that catch the naive
// run must be rows the control does not produce. A naive version whose
// catch does not depend on the race (a schema finding, a row the naive
// code writes whatever the timing) fails here: its control is caught too.
//
// Run one chapter's with -run 'TestEveryNaiveVersionHasAControlThatHolds/points'.
func TestEveryNaiveVersionHasAControlThatHolds(t *testing.T) {
	t.Parallel()
	var without []string
	for _, e := range program.Experiments() {
		if e.Naive == "" {
			continue
		}
		if e.Control == "" {
			without = append(without, e.ID)
			continue
		}
		t.Run(e.ID, func(t *testing.T) {
			t.Parallel()
			var naive, control []lab.InvariantView
			t.Run("naive", func(t *testing.T) { naive = lab.TestNaive(t, e, e2etest.Env) })
			t.Run("control", func(t *testing.T) { control = lab.TestControl(t, e, e2etest.Env) })
			if t.Failed() {
				return
			}
			offending := 0
			for _, id := range e.Catches {
				seen := map[string]bool{}
				for _, row := range rowsOf(control, id) {
					seen[row] = true
				}
				for _, row := range rowsOf(naive, id) {
					if seen[row] {
						t.Errorf("%s: the control produces the row that catches the naive run: %s", id, row)
					}
					offending++
				}
			}
			if offending == 0 {
				t.Errorf("no row of %v caught the naive run", e.Catches)
			}
		})
	}
	// A naive version without a control proves nothing about the race:
	// every one must declare it.
	if len(without) > 0 {
		t.Errorf("naive versions without a control (%d): %s", len(without), strings.Join(without, ", "))
	}
}

// rowsOf renders each row the invariant id reported.
func rowsOf(views []lab.InvariantView, id string) []string {
	var out []string
	for _, v := range views {
		if v.ID != id || v.Schema {
			continue
		}
		for _, row := range v.Rows {
			out = append(out, fmt.Sprint(row...))
		}
	}
	return out
}
