package pg_test

import (
	"context"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// Migration 0609 rewrote every format check's counted repetition ({0,99})
// as a length test and an unbounded one (*): PostgreSQL's regex engine
// expands a count into that many copies of its states, and a CHECK runs on
// every row version written. The rewrite must not change what a table
// accepts. Each check as it is now and as it was before 0609 (read from a
// second database migrated down past 0609, so the down file is what
// restores it) are evaluated side by side on the same values — every
// printable ASCII character first and second, a non-ASCII letter, a
// trailing newline, and valid strings of each length around every bound —
// and must agree on each.
func TestFormatChecksAcceptWhatTheirCountedFormsDid(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	before := pgtest.Pool(t, downPast(t, 609), 2)

	cases := []struct {
		table, constraint string
		// column is the checked one; fixed gives the others the check reads.
		column string
		fixed  []string // `'value' AS name`
	}{
		{"job", "job_kind_check", "kind", nil},
		{"idem_request", "idem_request_scope_check", "scope", nil},
		{"outbox_event", "outbox_event_topic_check", "topic", nil},
		{"outbox_consumer", "outbox_consumer_name_check", "name", nil},
		{"points_account", "points_account_id_format", "id", []string{`'user' AS kind`}},
		{"points_account", "points_account_id_format", "id", []string{`'system' AS kind`}},
		{"flashsale_sku", "flashsale_sku_format", "sku", nil},
		{"social_user", "social_user_user_id_check", "user_id", nil},
		{"social_like", "social_like_user_id_check", "user_id", nil},
		{"notify_user", "notify_user_user_id_check", "user_id", nil},
		{"notify_notification", "notify_notification_event_key_check", "event_key", nil},
		{"notify_notification", "notify_notification_template_check", "template", nil},
		{"shortlink_links", "shortlink_links_code_format", "code", nil},
		{"upload_blob", "upload_blob_sha256_check", "sha256", nil},
		{"upload_session", "upload_session_sha256_check", "sha256", nil},
		{"upload_chunk", "upload_chunk_sha256_check", "sha256", nil},
	}

	var probes []string
	for c := 0x20; c < 0x7f; c++ {
		probes = append(probes, string(rune(c)), "a"+string(rune(c)), "A"+string(rune(c)), "0"+string(rune(c)), "sys:"+string(rune(c)))
	}
	probes = append(probes, "", "é", "aé", "a\n", "abc\n", "\nabc", "sys:", "SYS:a")
	for _, n := range []int{1, 2, 3, 4, 31, 32, 33, 34, 35, 36, 37, 62, 63, 64, 65, 66, 98, 99, 100, 101, 102, 126, 127, 128, 129, 130, 198, 199, 200, 201, 202} {
		probes = append(probes, strings.Repeat("a", n), strings.Repeat("0", n), "sys:"+strings.Repeat("a", n), strings.Repeat("a", n)+"\n")
	}

	for _, tc := range cases {
		live, old := checkExpr(t, db, tc.table, tc.constraint), checkExpr(t, before, tc.table, tc.constraint)
		require.NotRegexp(t, countedRepetition, live, "%s still counts a repetition", tc.constraint)
		require.Regexp(t, countedRepetition, old, "%s before 0609 is the counted form", tc.constraint)

		cols := append([]string{"$1::text AS " + tc.column}, tc.fixed...)
		q := `SELECT (` + live + `) IS NOT DISTINCT FROM (` + old + `), (` + live + `), (` + old + `)
		        FROM (SELECT ` + strings.Join(cols, ", ") + `) AS v`
		accepted := 0
		for _, p := range probes {
			var same bool
			var now, then *bool
			require.NoError(t, db.QueryRow(ctx, q, p).Scan(&same, &now, &then), "%s on %q", tc.constraint, p)
			require.True(t, same, "%s (%v) disagrees with %s: %v against %v on %q", tc.constraint, tc.fixed, old, show(now), show(then), p)
			if then != nil && *then {
				accepted++
			}
		}
		// The probes reach both sides of each check: some accepted, some not.
		require.Greater(t, accepted, 0, "%s accepted no probe", tc.constraint)
		require.Less(t, accepted, len(probes), "%s accepted every probe", tc.constraint)
	}
}

// countedRepetition finds a regex match (~ or ~*) whose pattern counts a
// repetition: {n}, {n,} or {n,m}.
var countedRepetition = regexp.MustCompile(`~\*? '[^']*\{\d+(,\d*)?\}`)

// checkExpr is a check constraint's expression as the catalogue holds it.
func checkExpr(t *testing.T, db *pgxpool.Pool, table, constraint string) string {
	t.Helper()
	var expr string
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT pg_get_expr(conbin, conrelid) FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2`,
		table, constraint).Scan(&expr), "%s.%s", table, constraint)
	return expr
}

// downPast is a fresh database migrated down to just below version v
// (through every down file from the top to v's).
func downPast(t *testing.T, v int) string {
	t.Helper()
	ups, err := fs.Glob(migrationsFS, "*.up.sql")
	require.NoError(t, err)
	steps := 0
	for _, f := range ups {
		n, err := strconv.Atoi(f[:strings.IndexByte(f, '_')])
		require.NoError(t, err, f)
		if n >= v {
			steps++
		}
	}
	url := pgtest.URL(t)
	require.NoError(t, pg.Migrator{FS: migrationsFS, URL: url}.Down(steps))
	return url
}

// show prints a check's three-valued result.
func show(b *bool) string {
	if b == nil {
		return "null"
	}
	if *b {
		return "true"
	}
	return "false"
}

// No check in the schema — table or domain — counts a repetition in a
// regular expression: a new one would bring back the cost migration 0609
// removed (write it as a length test and `*`, as 0609 does). That the
// pattern finds such a check is shown above, on every form 0609 replaced.
func TestNoCheckCountsARepetition(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rows, err := db.Query(context.Background(), `
		SELECT CASE WHEN conrelid <> 0 THEN conrelid::regclass::text ELSE contypid::regtype::text END, conname, pg_get_constraintdef(oid)
		  FROM pg_constraint
		 WHERE contype = 'c' AND connamespace = 'public'::regnamespace`)
	require.NoError(t, err)
	checks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Owner, Name, Def string }])
	require.NoError(t, err)
	require.NotEmpty(t, checks)
	for _, c := range checks {
		require.NotRegexp(t, countedRepetition, c.Def, "%s.%s", c.Owner, c.Name)
	}
}
