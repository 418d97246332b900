package main

import (
	"path/filepath"
	"testing"
)

// The chapter pages' generated blocks (invariant SQL, experiment lists)
// must match the code: a changed query or a new experiment without
// `go run ./cmd/fencelab docs` fails here.
func TestChapterPagesMatchTheCode(t *testing.T) {
	drift, err := syncChapterPages(filepath.Join("..", "..", "docs", "chapters"), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drift {
		t.Error(d)
	}
}
