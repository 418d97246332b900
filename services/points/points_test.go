package points

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCursorRoundTripsAndRefusesForgeries(t *testing.T) {
	for _, id := range []int64{1, 42, 1<<63 - 1} {
		n, err := decodeCursor(encodeCursor(id))
		require.NoError(t, err)
		require.Equal(t, id, n)
	}
	first, err := decodeCursor("")
	require.NoError(t, err)
	require.Equal(t, int64(1<<63-1), first, "no cursor: from the newest")
	for _, c := range []string{"x", "djE6", "djE6MA", "djE6LTU", "MTIz", "djI6MTIz", "djE6MTIzIA", "djE6MTIz==", strings.Repeat("A", 65)} {
		_, err := decodeCursor(c)
		require.ErrorIs(t, err, errInvalidCursor, c)
	}
}

func TestPostingBounds(t *testing.T) {
	ok := PostingRequest{Amount: 30, Reason: "prize-17"}
	require.NoError(t, validatePosting("acct-0042", ok))
	require.NoError(t, validatePosting("acct-0042", PostingRequest{Amount: MaxAmount, Reason: strings.Repeat("é", MaxReasonLen/2)}))
	for _, amount := range []int64{0, -1, MaxAmount + 1, -1 << 63} {
		require.ErrorIs(t, validatePosting("acct-0042", PostingRequest{Amount: amount, Reason: "x"}), errInvalidAmount, amount)
	}
	for _, reason := range []string{"", strings.Repeat("r", MaxReasonLen+1), "a\tb", "a\x00", "\xff"} {
		require.ErrorIs(t, validatePosting("acct-0042", PostingRequest{Amount: 1, Reason: reason}), errInvalidReason, reason)
	}
	for _, id := range []string{"", "-a", ".a", "a b", "a/b", "sys:other", "sys:", strings.Repeat("a", 65), "ä"} {
		require.ErrorIs(t, validatePosting(id, ok), errInvalidAccountID, id)
	}
	for _, id := range []string{"a", "acct-0042", "A.b_c-9", IssuanceAccount, RedemptionAccount, strings.Repeat("a", 64)} {
		require.NoError(t, validatePosting(id, ok), id)
	}
}

// bench/pgbench/points.sql must run the statement the service runs, or
// the ratio bench/points-vs-pgbench.sh prints compares different work.
func TestPgbenchScriptRunsTheServiceSQL(t *testing.T) {
	script, err := os.ReadFile("../../bench/pgbench/points.sql")
	require.NoError(t, err)
	debit := strings.NewReplacer("@account", ":aid", "@amount", ":amount", "@client", ":aid", "@key", ":key",
		"@reason", ":reason", "@system", ":sysacct", "@shard", ":shard").Replace(sqlDebit)
	ws := regexp.MustCompile(`\s+`)
	require.Contains(t, ws.ReplaceAllString(string(script), " "), ws.ReplaceAllString(strings.TrimSpace(debit), " ")+";")
}
