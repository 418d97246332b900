// Package docs carries the book's chapters (docs/chapters/NN-slug.md) into
// the binary, so the console can show a chapter's text beside its live
// invariants and runnable experiments without the repository at hand.
package docs

import "embed"

// Chapters holds chapters/NN-slug.md, one file per chapter of lab.Chapters.
//
//go:embed chapters/*.md
var Chapters embed.FS
