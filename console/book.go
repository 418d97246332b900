package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"regexp"
	"strings"
	"sync"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"

	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/docs"
)

// A chapter's text is docs/chapters/NN-slug.md, embedded in the binary
// (package docs) and rendered with goldmark. goldmark without
// html.WithUnsafe drops raw HTML and refuses dangerous link schemes, so
// the Markdown can put nothing on the page but Markdown: the page keeps
// its Content-Security-Policy of no script. The text is cut after each
// heading that names an experiment (#### `points/concurrent-debits`) or
// an invariant (#### PTS-I4 — …), and the page puts that experiment's Run
// button, or that invariant's live status, right there.

// segment is a run of the chapter's HTML followed by what the page
// places after it: an experiment's run block or an invariant's status.
type segment struct {
	HTML      template.HTML
	Exp       string // experiment ID
	Invariant string // invariant ID
}

type bookText struct {
	Segments []segment
	Placed   map[string]bool // experiment IDs placed in the text
}

var (
	bookMu    sync.Mutex
	bookCache = map[string]*bookText{}
)

var invariantHeading = regexp.MustCompile(`^([A-Z]+-[IS][0-9]+)\b`)

// chapterFile returns the Markdown of chapter slug.
func chapterFile(slug string) ([]byte, bool) {
	names, _ := fs.Glob(docs.Chapters, "chapters/*-"+slug+".md")
	if len(names) != 1 {
		return nil, false
	}
	b, err := fs.ReadFile(docs.Chapters, names[0])
	return b, err == nil
}

// chapterText renders chapter slug, cut where experiments (of ids) and
// invariants are named. Chapters are part of the binary, so each is
// rendered once per process.
func chapterText(slug string, ids map[string]bool) (*bookText, error) {
	bookMu.Lock()
	defer bookMu.Unlock()
	if t, ok := bookCache[slug]; ok {
		return t, nil
	}
	src, ok := chapterFile(slug)
	if !ok {
		return nil, fmt.Errorf("console: no text for chapter %q", slug)
	}
	t, err := renderChapter(src, ids)
	if err != nil {
		return nil, err
	}
	bookCache[slug] = t
	return t, nil
}

func renderChapter(src []byte, ids map[string]bool) (*bookText, error) {
	md := goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough))
	doc := md.Parser().Parse(text.NewReader(src))
	placed := map[string]bool{}
	type mark struct{ id, exp, inv string }
	var marks []mark
	var drop []ast.Node
	var images []*ast.Image
	var links []*ast.Link
	first := true
	prev := 1 // the page's own <h1>
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			label := strings.TrimSpace(plain(n, src))
			if first && n.Level == 1 {
				// The page's own <h1> carries the chapter's number and title.
				drop = append(drop, n)
				first = false
				return ast.WalkSkipChildren, nil
			}
			first = false
			// A heading never goes more than one level below the one
			// before it (the chapters jump from ## to ####): a reader
			// navigating by headings finds no gap (WCAG 1.3.1).
			if n.Level > prev+1 {
				n.Level = prev + 1
			}
			prev = n.Level
			if ids[label] && !placed[label] {
				placed[label] = true
				id := anchor(label)
				n.SetAttributeString("id", []byte(id))
				marks = append(marks, mark{id: id, exp: label})
			} else if m := invariantHeading.FindStringSubmatch(label); m != nil {
				id := "text-" + m[1]
				n.SetAttributeString("id", []byte(id))
				marks = append(marks, mark{id: id, inv: m[1]})
			}
			return ast.WalkSkipChildren, nil
		case *ast.Image:
			images = append(images, n)
			return ast.WalkSkipChildren, nil
		case *ast.Link:
			links = append(links, n)
		}
		return ast.WalkContinue, nil
	})
	// The tree changes after the walk (a walk stops at a removed node).
	for _, n := range drop {
		n.Parent().RemoveChild(n.Parent(), n)
	}
	for _, n := range images {
		// The pictures are of the console itself; on the console they
		// are their caption.
		s := ast.NewString([]byte("(picture in the repository's docs/img: " + plain(n, src) + ")"))
		n.Parent().ReplaceChild(n.Parent(), n, s)
	}
	for _, n := range links {
		// A relative link points into the repository, which is not
		// served: keep its words.
		d := string(n.Destination)
		if strings.HasPrefix(d, "https://") || strings.HasPrefix(d, "http://") || strings.HasPrefix(d, "#") {
			continue
		}
		p := n.Parent()
		for c := n.FirstChild(); c != nil; {
			next := c.NextSibling()
			p.InsertBefore(p, n, c)
			c = next
		}
		p.RemoveChild(p, n)
	}
	var out bytes.Buffer
	if err := md.Renderer().Render(&out, src, doc); err != nil {
		return nil, err
	}
	// A table whose first header cell is empty labels nothing there: a
	// data cell says so to a screen reader.
	html := strings.ReplaceAll(out.String(), "<th></th>", "<td></td>")
	t := &bookText{Placed: placed}
	for _, m := range marks {
		open := strings.Index(html, ` id="`+template.HTMLEscapeString(m.id)+`"`)
		if open < 0 {
			continue
		}
		end := strings.Index(html[open:], "</h")
		if end < 0 {
			continue
		}
		end = open + end + len("</h0>")
		t.Segments = append(t.Segments, segment{HTML: template.HTML(html[:end]), Exp: m.exp, Invariant: m.inv}) //nolint:gosec // goldmark's safe renderer: no raw HTML
		html = html[end:]
	}
	t.Segments = append(t.Segments, segment{HTML: template.HTML(html)}) //nolint:gosec // as above
	return t, nil
}

// plain is a node's text without markup.
func plain(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// clusterExperiment is an experiment that needs a whole cluster (chapter
// 14: Patroni, etcd, HAProxy, three serve replicas): it runs as a Go
// test, never from the console, which cannot start a cluster.
type clusterExperiment struct{ Claim, Test, Pkg string }

// clusterExperiments are the chapters' experiments that are not lab
// experiments, by chapter slug (the chapter's text has their table).
var clusterExperiments = map[string][]clusterExperiment{
	"failover": {
		{"With a synchronous standby, a failover keeps every acknowledged write and no fence goes backwards.", "TestFailoverWithSyncStandbyKeepsEveryAcknowledgedWrite", "./e2e/cluster/"},
		{"With an asynchronous standby, a failover can lose acknowledged writes and reissue fences (the naive setting).", "TestFailoverWithAsyncStandbyCanLoseAcknowledgedWrites", "./e2e/cluster/"},
		{"A killed serve replica's in-flight requests, retried with their keys, land once.", "TestKilledReplicaRetriesLandOnce", "./e2e/cluster/"},
	},
}

// noNaive is said of an experiment without a naive version that does
// not say why itself (lab.Experiment.NoNaive).
const noNaive = "this experiment shows the guarded code through a fault or a race; there is no weaker version of it to run beside it."

// noNaiveOf is the one line that says why e has no naive version: its
// own reason when it gives one, else the generic sentence.
func noNaiveOf(e lab.Experiment) string {
	if e.NoNaive != "" {
		return strings.TrimSuffix(e.NoNaive, ".") + "."
	}
	return noNaive
}

// noControl is said of a naive version without a control: nothing yet
// shows its catch depends on the race rather than on the naive code.
const noControl = "this naive version declares no control yet (the same naive code without the race or the fault), so nothing here shows that its catch comes from the interleaving."

// runWhat names what an experiment's Run button runs: the guarded
// version, then its naive version and the control when it has them.
func runWhat(e lab.Experiment) string {
	switch {
	case e.Naive != "" && e.Control != "":
		return "it, its naive version and the control"
	case e.Naive != "":
		return "it and its naive version"
	}
	return "it"
}

// anchor is an experiment's element id on its chapter's page: its ID with
// the slash spelled "--", so a link's fragment needs no escaping
// ("#exp-points--concurrent-debits").
func anchor(experiment string) string { return "exp-" + strings.ReplaceAll(experiment, "/", "--") }
