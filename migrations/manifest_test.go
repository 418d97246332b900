package migrations_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/migrations"
)

// update appends the migrations missing from manifest.sum (never rewrites
// a landed entry): go test ./migrations -run TestLandedMigrationsAreUnchanged -update
var update = flag.Bool("update", false, "append new migrations to manifest.sum")

const manifestFile = "manifest.sum"

var fileRE = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)

type entry struct {
	sum     string
	name    string
	version uint
}

func versionOf(t *testing.T, name string) uint {
	t.Helper()
	m := fileRE.FindStringSubmatch(name)
	require.NotNil(t, m, "%s: a migration is named NNNN_<owner>_<what>.up.sql / .down.sql", name)
	v, err := strconv.ParseUint(m[1], 10, 32)
	require.NoError(t, err)
	return uint(v)
}

// readManifest reads manifest.sum in its order (the order files landed in
// since the baseline); its lines are sha256sum's, so
// `cd migrations && sha256sum -c manifest.sum` checks it too.
func readManifest(t *testing.T) []entry {
	t.Helper()
	b, err := os.ReadFile(manifestFile)
	require.NoError(t, err, "migrations/manifest.sum lists every landed migration")
	var out []entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		require.True(t, ok && len(sum) == 64, "manifest.sum line %d: want `<sha256>  <file>`, got %q", n, sc.Text())
		out = append(out, entry{sum: sum, name: name, version: versionOf(t, name)})
	}
	require.NoError(t, sc.Err())
	return out
}

// embedded is every migration file the binary carries, by name → sha256.
func embedded(t *testing.T) map[string]string {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]string{}
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		require.NoError(t, err)
		s := sha256.Sum256(b)
		out[f] = hex.EncodeToString(s[:])
	}
	return out
}

func top(landed []entry) uint {
	var v uint
	for _, e := range landed {
		v = max(v, e.version)
	}
	return v
}

// newFiles are the embedded files the manifest does not list yet, in
// version order (up before down).
func newFiles(landed []entry, files map[string]string) []string {
	listed := map[string]bool{}
	for _, e := range landed {
		listed[e.name] = true
	}
	var out []string
	for f := range files {
		if !listed[f] {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// golang-migrate runs a file once per database and never looks at it
// again: an edit to a landed file reaches fresh databases only, and every
// database already past it keeps the old schema without a word. So a
// landed file's bytes are frozen; a change is a new file on top. Every
// file must be listed, so that nothing lands unfrozen.
func TestLandedMigrationsAreUnchanged(t *testing.T) {
	landed := readManifest(t)
	files := embedded(t)
	for _, e := range landed {
		got, ok := files[e.name]
		if !ok {
			t.Errorf("%s landed (manifest.sum) and is gone: a landed migration is never removed or renamed", e.name)
			continue
		}
		if got != e.sum {
			t.Errorf("%s landed and was edited (sha256 %s, manifest.sum %s): revert it and put the change in a new migration above %04d",
				e.name, got, e.sum, top(landed))
		}
	}
	fresh := newFiles(landed, files)
	if len(fresh) == 0 {
		return
	}
	if !*update {
		t.Fatalf("not in manifest.sum: %s\nadd them with: go test ./migrations -run TestLandedMigrationsAreUnchanged -update",
			strings.Join(fresh, ", "))
	}
	for _, f := range fresh {
		require.Greater(t, versionOf(t, f), top(landed), "%s is numbered below the top landed migration: renumber it above %04d before adding it", f, top(landed))
	}
	out, err := os.OpenFile(manifestFile, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	defer out.Close()
	for _, f := range fresh {
		_, err := fmt.Fprintf(out, "%s  %s\n", files[f], f)
		require.NoError(t, err)
		t.Logf("manifest.sum: added %s", f)
	}
}

// golang-migrate applies only versions above a database's current one: a
// file numbered below the top is never run on a database already past it.
// So each new file goes above every landed one, whatever its module, and
// the manifest, read in order, climbs. One version is one name (its up and
// its down).
func TestNoMigrationBelowTheTop(t *testing.T) {
	landed := readManifest(t)
	names := map[uint]string{}
	var prev uint
	for i, e := range landed {
		stem := strings.TrimSuffix(strings.TrimSuffix(e.name, ".up.sql"), ".down.sql")
		if other, ok := names[e.version]; ok && other != stem {
			t.Errorf("version %04d has two names: %s and %s", e.version, other, stem)
		}
		names[e.version] = stem
		if i > 0 && e.version < prev {
			t.Errorf("manifest.sum: %s landed after %04d, below it", e.name, prev)
		}
		prev = max(prev, e.version)
	}
	for _, f := range newFiles(landed, embedded(t)) {
		if v := versionOf(t, f); v <= top(landed) {
			t.Errorf("%s is new and numbered %04d, not above the top landed migration %04d: golang-migrate would never run it on a database already at the top; renumber it %04d or higher",
				f, v, top(landed), top(landed)+1)
		}
	}
}
