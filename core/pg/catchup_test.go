package pg_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/pg"
	"github.com/fencelab/fencelab/core/pg/pgserver"
	"github.com/fencelab/fencelab/core/pg/pgtest"
)

// oldTops are the sequences dev databases were left at while modules had
// version ranges: the top version and the files that existed then. A
// migration added later below such a top is never applied there by
// golang-migrate; a catch-up migration above the top repeats it
// (migrations/0603_catch_up.up.sql). Since 0604 every file goes on top
// (migrations TestNoMigrationBelowTheTop), so this list no longer grows.
var oldTops = []struct {
	top      uint
	versions []uint
	// replaced: files whose content was different then (testdata copies).
	replaced string
}{
	// Before the bounded-growth round (the parent of commit 3ba377e, which
	// added 0021, 0033 — first named 0032 —, 0311 and 0501; 0032 moved
	// 0320's like index into core's range, so 0320 is the old one).
	{top: 600, versions: []uint{1, 10, 11, 20, 30, 31, 100, 200, 210, 300, 310, 320, 400, 500, 600},
		replaced: "testdata/migrations-0600"},
	// The top when 0312 and 0401 were added below it.
	{top: 601, versions: []uint{1, 10, 11, 20, 21, 30, 31, 32, 33, 100, 200, 210, 300, 310, 311, 320, 400, 500, 501, 600, 601}},
	// The top when 0502 (the clicks index dropped, issue 25) was added
	// below it; 0604 repeats it.
	{top: 603, versions: []uint{1, 10, 11, 20, 21, 30, 31, 32, 33, 100, 200, 210, 300, 310, 311, 312, 320, 400, 401, 500, 501, 600, 601, 602, 603}},
	// After the catch-ups: every later file is above 604, so it converges
	// by being applied.
	{top: 604, versions: []uint{1, 10, 11, 20, 21, 30, 31, 32, 33, 100, 200, 210, 300, 310, 311, 312, 320, 400, 401, 500, 501, 502, 600, 601, 602, 603, 604}},
}

var versionRE = regexp.MustCompile(`^(\d+)_.*\.(up|down)\.sql$`)

// sequenceAt is the migration files of the given versions, with the
// replaced directory's files over them.
func sequenceAt(t *testing.T, versions []uint, replaced string) fs.FS {
	keep := map[uint]bool{}
	for _, v := range versions {
		keep[v] = true
	}
	out := fstest.MapFS{}
	found := map[uint]bool{}
	entries, err := fs.ReadDir(migrationsFS, ".")
	require.NoError(t, err)
	for _, e := range entries {
		m := versionRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.ParseUint(m[1], 10, 32)
		if !keep[uint(v)] {
			continue
		}
		b, err := fs.ReadFile(migrationsFS, e.Name())
		require.NoError(t, err)
		out[e.Name()] = &fstest.MapFile{Data: b}
		found[uint(v)] = true
	}
	require.Len(t, found, len(versions), "every version of the old sequence is still in migrations/")
	if replaced != "" {
		files, err := filepath.Glob(filepath.Join(replaced, "*.sql"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			out[filepath.Base(f)] = &fstest.MapFile{Data: b}
		}
	}
	return out
}

// A dev database migrated before migrations were added below its top
// version converges, by the current sequence's catch-up, to the schema a
// fresh database gets: the same tables, columns, indexes, constraints,
// functions and triggers (pg_dump --schema-only, compared whole).
func TestAnOldDevDatabaseCatchesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.Server(t)
	admin := pgtest.Pool(t, srv.URL("postgres"), 2)
	dump := filepath.Join(pgserver.FindBinDir(), "pg_dump")
	_, err := os.Stat(dump)
	require.NoError(t, err, "pg_dump is needed beside initdb (apt install postgresql-15 / postgresql-client)")

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	newDB := func(name string) string {
		name = "catchup_" + name + "_" + hex.EncodeToString(suffix)
		_, err := admin.Exec(ctx, `CREATE DATABASE `+name)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`) })
		return srv.URL(name)
	}
	schema := func(url string) string {
		out, err := exec.CommandContext(ctx, dump, "--schema-only", "--no-owner", "--no-privileges", "--dbname", url).CombinedOutput()
		require.NoError(t, err, string(out))
		// pg_dump 15.14+ fences the script with \restrict <random key>.
		lines := strings.Split(string(out), "\n")
		kept := lines[:0]
		for _, l := range lines {
			if !strings.HasPrefix(l, `\restrict `) && !strings.HasPrefix(l, `\unrestrict `) {
				kept = append(kept, l)
			}
		}
		return strings.Join(kept, "\n")
	}

	fresh := newDB("fresh")
	require.NoError(t, pg.Migrator{FS: migrationsFS, URL: fresh}.Up())
	want := schema(fresh)
	require.Contains(t, want, "CREATE TABLE public.job", "the dump holds the schema")

	for _, old := range oldTops {
		t.Run("from "+strconv.Itoa(int(old.top)), func(t *testing.T) {
			u := newDB("from" + strconv.Itoa(int(old.top)))
			require.NoError(t, pg.Migrator{FS: sequenceAt(t, old.versions, old.replaced), URL: u}.Up())
			at, err := pg.Latest(sequenceAt(t, old.versions, old.replaced))
			require.NoError(t, err)
			require.Equal(t, old.top, at)
			if old.top < 604 {
				require.NotEqual(t, want, schema(u), "the old sequence's schema differs (else this case proves nothing)")
			}
			require.NoError(t, pg.Migrator{FS: migrationsFS, URL: u}.Up())
			got := schema(u)
			if got != want {
				t.Fatalf("a database migrated to %d and then up differs from a fresh one:\n%s", old.top, lineDiff(want, got))
			}
		})
	}
}

// lineDiff lists the lines only one of the dumps has.
func lineDiff(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var b strings.Builder
	for l, n := range w {
		if g[l] < n {
			b.WriteString("- fresh only:  " + l + "\n")
		}
	}
	for l, n := range g {
		if w[l] < n {
			b.WriteString("+ caught up only: " + l + "\n")
		}
	}
	return b.String()
}
