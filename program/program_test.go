package program_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
	"github.com/fencelab/fencelab/core/lab"
	"github.com/fencelab/fencelab/program"
)

// The static part of the program is readable without a database: names,
// chapters, invariants, error mappings and benches, all well formed.
func TestModulesAreReadableWithoutADatabase(t *testing.T) {
	mods := program.Modules(nil)
	require.NotEmpty(t, mods)
	names := map[string]bool{}
	last := 0
	for _, m := range mods {
		require.NotEmpty(t, m.Name)
		require.False(t, names[m.Name], "module %s listed twice", m.Name)
		names[m.Name] = true
		if m.Chapter != "" {
			c, ok := lab.ChapterOf(m.Chapter)
			require.True(t, ok, "module %s: chapter %q is not in lab.Chapters", m.Name, m.Chapter)
			require.GreaterOrEqual(t, c.N, last, "module %s is out of chapter order", m.Name)
			last = c.N
		}
	}
	invs := program.Invariants().All()
	require.NotEmpty(t, invs)
	ids := map[string]bool{}
	for _, inv := range invs {
		ids[inv.ID] = true
	}
	for _, id := range []string{"CORE-I0", "LOCK-I1", "CLAIM-I1", "IDEM-I1", "OUTBOX-I1", "PTS-I1", "FS-R1", "ORD-O1", "REL-I1", "FEED-I1", "LIKE-I1", "NTF-I1", "SL-I1", "UP-F1"} {
		require.True(t, ids[id], "invariant %s is not in the registry", id)
	}
	require.NotPanics(t, func() { app.Errors(mods) }, "every error mapping is complete")
	benches := program.Benches()
	var bnames []string
	for _, b := range benches {
		require.NotEmpty(t, b.Summary, b.Name)
		require.NotNil(t, b.Run, b.Name)
		bnames = append(bnames, b.Name)
	}
	require.ElementsMatch(t, []string{"claim", "growth", "outbox", "points", "flashsale", "feed", "shortlink", "upload", "console", "hostile", "explore"}, bnames)
}
