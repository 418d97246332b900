package upload

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencelab/fencelab/core/app"
)

func TestParseSizeAcceptsUnitsAndRefusesNonsense(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1": 1, "512B": 512, "64KiB": 64 << 10, "8MiB": 8 << 20, "256MiB": 256 << 20, "4GiB": 4 << 30,
		"1TiB": 1 << 40, "10MB": 10_000_000, "1kB": 1000, " 2 MiB ": 2 << 20,
	} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "8mib", "8 PB", "9223372036854775807GiB"} {
		_, err := ParseSize(in)
		require.Error(t, err, in)
	}
	require.Equal(t, "256.0 MiB", FormatSize(256<<20))
	require.Equal(t, "1023 B", FormatSize(1023))
}

func TestLoadConfigRefusesBadSettings(t *testing.T) {
	t.Parallel()
	ac := app.Defaults()
	ac.DataDir = t.TempDir()
	c, err := LoadConfig(ac)
	require.NoError(t, err)
	require.Equal(t, ac.DataDir+"/upload", c.Dir)
	for k, v := range map[string]string{
		EnvMaxFileSize: "0", EnvMaxChunkSize: "2GiB", EnvMaxChunks: "0", EnvGrace: "soon",
		envGCInterval: "10ms", envChunkTimeout: "-1s",
	} {
		ac.Settings = map[string]string{k: v}
		_, err := LoadConfig(ac)
		require.ErrorContains(t, err, k)
	}
	ac.Settings = map[string]string{EnvMaxFileSize: "1GiB", EnvMaxChunkSize: "8MiB", EnvGrace: "1h"}
	c, err = LoadConfig(ac)
	require.NoError(t, err)
	require.EqualValues(t, 1<<30, c.MaxFileSize)
	require.EqualValues(t, 8<<20, c.MaxChunkSize)
}

// Byte-range locks exclude every other opener of the partial file, in one
// process as across processes, and end when their file is closed.
func TestPartialRangeLocksExcludeOtherOpeners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := NewLocalStore(t.TempDir())
	require.NoError(t, err)
	id := uuid.NewString()
	a, err := st.OpenPartial(ctx, id, true)
	require.NoError(t, err)
	b, err := st.OpenPartial(ctx, id, false)
	require.NoError(t, err)
	defer b.Close()

	unlockA, err := a.LockRange(0, 10)
	require.NoError(t, err)
	_, err = b.LockRange(5, 10)
	require.ErrorIs(t, err, errRangeBusy)
	unlockB, err := b.LockRange(10, 10)
	require.NoError(t, err, "an adjacent range is free")
	unlockB()
	unlockA()
	unlockB, err = b.LockRange(0, 10)
	require.NoError(t, err, "unlocked")
	unlockB()

	_, err = a.LockRange(0, 10)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	unlockB, err = b.LockRange(0, 10)
	require.NoError(t, err, "closing the file released its lock")
	unlockB()
}

func TestPromoteMovesTheWholeFileToItsAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := NewLocalStore(t.TempDir())
	require.NoError(t, err)
	id := uuid.NewString()
	p, err := st.OpenPartial(ctx, id, true)
	require.NoError(t, err)
	_, err = p.WriteAt([]byte("world"), 6)
	require.NoError(t, err)
	_, err = p.WriteAt([]byte("hello "), 0)
	require.NoError(t, err)
	require.NoError(t, p.Sync())
	require.NoError(t, p.Close())
	sum := sha256.Sum256([]byte("hello world"))
	hexSum := hex.EncodeToString(sum[:])

	require.NoError(t, st.Promote(ctx, id, hexSum))
	b, err := os.ReadFile(st.BlobPath(hexSum))
	require.NoError(t, err)
	require.Equal(t, "hello world", string(b))
	_, err = st.OpenPartial(ctx, id, false)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorIs(t, st.Promote(ctx, id, hexSum), fs.ErrNotExist, "promoted once")
	info, err := st.StatBlob(ctx, hexSum)
	require.NoError(t, err)
	require.EqualValues(t, 11, info.Size)

	require.NoError(t, st.RemoveBlob(ctx, hexSum))
	require.NoError(t, st.RemoveBlob(ctx, hexSum), "removing a missing blob is fine")
	_, err = st.OpenBlob(ctx, hexSum)
	require.ErrorIs(t, err, errBlobMissing)
	require.Error(t, st.Promote(ctx, "../etc", hexSum), "names are checked")
	require.Error(t, st.RemoveBlob(ctx, "../../x"))
}

func TestStoreBindsToOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := NewLocalStore(dir)
	require.NoError(t, err)
	first, second := uuid.NewString(), uuid.NewString()
	require.NoError(t, st.Bind(ctx, first))
	require.NoError(t, st.Bind(ctx, first), "binding again to the same database")
	again, err := NewLocalStore(dir)
	require.NoError(t, err)
	require.ErrorIs(t, again.Bind(ctx, second), errStoreBound)
}

func TestChecksumHeaders(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("chunk"))
	hexSum, b64 := hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(sum[:])
	for _, h := range []http.Header{
		{"Content-Sha256": {hexSum}},
		{"Content-Digest": {"sha-256=:" + b64 + ":"}},
		{"Content-Digest": {"sha-512=:AAAA:, sha-256=:" + b64 + ":"}, "Content-Sha256": {hexSum}},
	} {
		got, err := checksumOf(h)
		require.NoError(t, err, h)
		require.Equal(t, sum[:], []byte(got), h)
	}
	got, err := checksumOf(http.Header{"Content-Digest": {"sha-512=:AAAA:"}})
	require.NoError(t, err)
	require.Nil(t, got, "only sha-256 is verified; other algorithms are ignored")
	other := sha256.Sum256([]byte("other"))
	for _, h := range []http.Header{
		{"Content-Sha256": {"xyz"}},
		{"Content-Digest": {"sha-256=" + b64}},
		{"Content-Digest": {"sha-256=:QUJD:"}},
		{"Content-Digest": {"sha-256=:" + b64 + ":"}, "Content-Sha256": {hex.EncodeToString(other[:])}},
	} {
		_, err := checksumOf(h)
		require.True(t, errors.Is(err, errChecksumHeader), "%v: %v", h, err)
	}
}

// Issue 20 item 15: a file name that lies when shown ("invoice\u202egpj.exe"
// displays as "invoiceexe.jpg") or names a directory ("..") is refused.
func TestFileNamesRefuseBidiControlAndDotOnly(t *testing.T) {
	for _, bad := range []string{"invoice\u202egpj.exe", "a\u2066b", "zero\u200bwidth", "bom\ufeff", "line\u2028sep",
		"c1\u0085", "tab\tname", "..", ".", "...", " . ", "a/b", `a\b`} {
		_, _, err := validCommit(CommitRequest{Name: bad})
		require.ErrorIs(t, err, errInvalidName, "%q", bad)
	}
	for _, good := range []string{"photo.bin", "..hidden", "résumé 2026.pdf", "日本語.txt", "a.b.c"} {
		_, _, err := validCommit(CommitRequest{Name: good})
		require.NoError(t, err, "%q", good)
	}
}
