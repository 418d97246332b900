package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/program"
)

// The chapter pages (docs/chapters/NN-slug.md) are prose written by hand
// with two blocks generated from code — the invariants with their SQL and
// the experiments with their commands — so what a reader reads is what
// `fencelab check` and `fencelab lab` run. TestChapterPagesMatchTheCode
// fails when they drift; `fencelab docs` rewrites them.
const (
	beginInvariants  = "<!-- BEGIN GENERATED: invariants -->"
	endInvariants    = "<!-- END GENERATED: invariants -->"
	beginExperiments = "<!-- BEGIN GENERATED: experiments -->"
	endExperiments   = "<!-- END GENERATED: experiments -->"
)

func runDocs(args []string) error {
	fs := newFlags("docs", "docs [--check] [--explore [--explore-all]] [--dir docs/chapters]")
	check := fs.Bool("check", false, "report pages whose generated blocks differ from the code, change nothing (exit 1 on drift)")
	dir := fs.String("dir", filepath.Join("docs", "chapters"), "the chapter pages")
	explore := fs.Bool("explore", false, "first run the explorations of every explorable experiment not recorded for the actors it declares now (minutes), and record them in docs/explored.json: the pages' schedule tables")
	exploreAll := fs.Bool("explore-all", false, "with --explore: run every exploration again, recorded or not")
	url := fs.String("database-url", "", "with --explore: a PostgreSQL server to make scratch databases on (default: a throwaway local cluster)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *explore && !*check {
		if err := exploreForDocs(*dir, *url, *exploreAll); err != nil {
			return err
		}
	}
	drift, err := syncChapterPages(*dir, !*check)
	if err != nil {
		return err
	}
	for _, d := range drift {
		fmt.Println(d)
	}
	if *check && len(drift) > 0 {
		return exitError{code: 1}
	}
	return nil
}

// chapterPage is the path of a chapter's page in dir.
func chapterPage(dir string, c lab.Chapter) string {
	return filepath.Join(dir, fmt.Sprintf("%02d-%s.md", c.N, c.Slug))
}

// syncChapterPages regenerates every page's blocks; it returns one line per
// page that differed (and rewrites them when write is set).
func syncChapterPages(dir string, write bool) ([]string, error) {
	var drift []string
	rec, err := readExplored(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range program.Experiments() {
		if _, ok := rec.current(e); e.Explore != nil && !ok {
			drift = append(drift, fmt.Sprintf("%s: %s has no recorded exploration for the actors it declares (run `go run ./cmd/fencelab docs --explore`)",
				exploredPath(dir), e.ID))
		}
	}
	for _, c := range lab.Chapters {
		path := chapterPage(dir, c)
		old, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			drift = append(drift, path+": missing (every chapter has a page)")
			continue
		}
		if err != nil {
			return nil, err
		}
		text := string(old)
		for _, b := range []struct{ begin, end, body string }{
			{beginInvariants, endInvariants, invariantsBlock(c)},
			{beginExperiments, endExperiments, experimentsBlock(c, rec)},
		} {
			var ok bool
			text, ok = replaceBlock(text, b.begin, b.end, b.body)
			if !ok {
				drift = append(drift, fmt.Sprintf("%s: no %s … %s block", path, b.begin, b.end))
			}
		}
		if text == string(old) {
			continue
		}
		drift = append(drift, path+": generated blocks differ from the code (run `go run ./cmd/fencelab docs`)")
		if write {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				return nil, err
			}
		}
	}
	return drift, nil
}

func replaceBlock(text, begin, end, body string) (string, bool) {
	i := strings.Index(text, begin)
	j := strings.Index(text, end)
	if i < 0 || j < i {
		return text, false
	}
	return text[:i+len(begin)] + "\n" + body + text[j:], true
}

func invariantsBlock(c lab.Chapter) string {
	var b bytes.Buffer
	n := 0
	for _, inv := range program.Invariants().All() {
		if lab.ChapterOfInvariant(inv.ID) != c.Slug {
			continue
		}
		n++
		fmt.Fprintf(&b, "#### %s — %s\n\n", inv.ID, inv.Statement)
		if inv.Schema {
			b.WriteString("A schema invariant: it reports a guard missing from the catalog, never a row of data, and never catches a naive run.\n\n")
		}
		if inv.SQL != "" {
			fmt.Fprintf(&b, "```sql\n%s\n```\n\n", dedent(inv.SQL))
		} else {
			b.WriteString("Checked in Go (it also looks outside the database); `fencelab check --explain " + inv.ID + "` says how.\n\n")
		}
	}
	if n == 0 {
		b.WriteString("_This chapter's guarantees are checked by its experiments' own log joins; it registers no SQL invariant._\n\n")
	} else {
		fmt.Fprintf(&b, "Each query returns the rows that break the invariant: none means it holds. `fencelab check %s` runs them on a live database.\n\n", firstModule(c))
	}
	return b.String()
}

func firstModule(c lab.Chapter) string {
	for _, inv := range program.Invariants().All() {
		if lab.ChapterOfInvariant(inv.ID) == c.Slug {
			return inv.Module
		}
	}
	return c.Slug
}

func experimentsBlock(c lab.Chapter, rec exploredRecord) string {
	var b bytes.Buffer
	n := 0
	for _, e := range program.Experiments() {
		if !strings.HasPrefix(e.ID, c.Slug+"/") {
			continue
		}
		n++
		fmt.Fprintf(&b, "#### `%s`\n\n%s\n\n", e.ID, e.Claim)
		fmt.Fprintf(&b, "- run it: `fencelab lab run %s` (checks %s)\n", e.ID, strings.Join(e.Invariants, ", "))
		if e.Naive != "" {
			fmt.Fprintf(&b, "- the naive version — %s: `fencelab lab run %s --naive` (caught by %s)\n", e.Naive, e.ID, strings.Join(e.Catches, ", "))
		}
		if e.Control != "" {
			fmt.Fprintf(&b, "- its control — %s: `fencelab lab run %s --control` (holds; `--naive --control` shows both side by side)\n", e.Control, e.ID)
		}
		if e.Test != "" {
			// A subtest of its chapter's TestExperiments: naming the parent
			// keeps `-run` from running every other top-level test too.
			fmt.Fprintf(&b, "- as a test: `go test -v -run '^TestExperiments$/^%s$' ./e2e/...`\n", e.Test)
		}
		if e.Explore != nil {
			b.WriteString(schedulesLines(rec, e))
		}
		b.WriteString("\n")
	}
	if n == 0 {
		b.WriteString("_No lab experiment yet._\n\n")
	}
	return b.String()
}

// dedent removes the common leading white space of the SQL's lines.
func dedent(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	prefix := ""
	first := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lead := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = lead, false
			continue
		}
		for !strings.HasPrefix(lead, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, prefix)
		lines[i] = strings.ReplaceAll(lines[i], "\t", "    ")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
