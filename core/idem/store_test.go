package idem

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bench/pgbench/points.sql must store the response with the statement
// the server runs (the finish that refuses when the fence is gone, with
// the COMMIT in its round trip), or the ratio bench/points-vs-pgbench.sh
// prints compares different work.
func TestPgbenchScriptRunsTheFinishSQL(t *testing.T) {
	script, err := os.ReadFile("../../bench/pgbench/points.sql")
	require.NoError(t, err)
	finish := strings.NewReplacer("@scope", ":scope", "@subject", ":aid", "@key", ":key", "@fence", ":fence",
		"@status", ":status", "@content_type", ":ctype", "@body", ":body").Replace(sqlFinish)
	ws := regexp.MustCompile(`\s+`)
	require.Contains(t, ws.ReplaceAllString(string(script), " "), ws.ReplaceAllString(strings.TrimSpace(finish), " ")+"; COMMIT;")
	require.Contains(t, sqlFinish, "'"+fenceLostMarker)
}
