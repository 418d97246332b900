package console

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/lab"
)

// Every chapter of lab.Chapters has its text embedded, and the text is
// cut after the heading of each experiment it names.
func TestEveryChapterHasItsTextWithExperimentsPlaced(t *testing.T) {
	t.Parallel()
	for _, ch := range lab.Chapters {
		src, ok := chapterFile(ch.Slug)
		require.True(t, ok, "docs/chapters/NN-%s.md is embedded", ch.Slug)
		require.NotEmpty(t, src)
	}
	src, _ := chapterFile("points")
	ids := map[string]bool{"points/concurrent-debits": true, "points/lost-response": true}
	bt, err := renderChapter(src, ids)
	require.NoError(t, err)
	require.True(t, bt.Placed["points/concurrent-debits"])
	require.True(t, bt.Placed["points/lost-response"])
	var html strings.Builder
	var exps []string
	for _, s := range bt.Segments {
		html.WriteString(string(s.HTML))
		if s.Exp != "" {
			exps = append(exps, s.Exp)
			require.Regexp(t, `<h[2-6] id="exp-[^"]+"><code>`+s.Exp+`</code></h[2-6]>\s*$`, string(s.HTML), "a run block follows its experiment's heading")
		}
	}
	require.Equal(t, []string{"points/concurrent-debits", "points/lost-response"}, exps, "in the text's order")
	out := html.String()
	require.NotContains(t, out, "<h1", "the page's own h1 carries the title")
	require.NotContains(t, out, "<img", "pictures become their caption")
	require.Regexp(t, `<h[2-6] id="text-PTS-I4">`, out, "an invariant's heading is marked for its live status")
	// Headings never skip a level.
	prev := 1
	for _, m := range regexp.MustCompile(`<h([1-6])[ >]`).FindAllStringSubmatch(out, -1) {
		l := int(m[1][0] - '0')
		require.LessOrEqual(t, l, prev+1, "a heading h%d after h%d", l, prev)
		prev = l
	}
}

// Raw HTML in a chapter never reaches the page (the page runs no script).
func TestChapterTextDropsRawHTML(t *testing.T) {
	t.Parallel()
	bt, err := renderChapter([]byte("# T\n\nsome <script>alert(1)</script> text\n\n<iframe src=x></iframe>\n\n[x](javascript:alert(1))\n"), nil)
	require.NoError(t, err)
	out := string(bt.Segments[0].HTML)
	require.NotContains(t, out, "<script")
	require.NotContains(t, out, "<iframe")
	require.NotContains(t, out, "javascript:")
	require.Contains(t, out, "text")
}
