package book_test

import (
	"testing"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/lab/book"
)

// The one list is in the book's order, every ID is unique and names a
// chapter, and every experiment can be run and checked.
func TestTheListIsInBookOrder(t *testing.T) {
	es := book.Experiments()
	if len(es) == 0 {
		t.Fatal("the book lists no experiment")
	}
	sorted := lab.Sorted(es)
	if len(sorted) != len(es) {
		t.Fatalf("%d experiments name no chapter of the book", len(es)-len(sorted))
	}
	seen := map[string]bool{}
	for i, e := range es {
		if sorted[i].ID != e.ID {
			t.Fatalf("experiment %d is %s, but the book's order puts %s there", i, e.ID, sorted[i].ID)
		}
		if seen[e.ID] {
			t.Fatalf("%s is listed twice", e.ID)
		}
		seen[e.ID] = true
		if e.Run == nil || e.Claim == "" || len(e.Invariants) == 0 {
			t.Fatalf("%s lacks a timeline, a claim or invariants", e.ID)
		}
		if e.Naive != "" && len(e.Catches) == 0 {
			t.Fatalf("%s has a naive version that nothing catches", e.ID)
		}
	}
}
