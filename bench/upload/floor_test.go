package upload

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The floor receives every byte of the source over TCP, in chunks that do
// not divide the file evenly, stores them and hashes them: its digest is
// the source's, and it leaves nothing behind.
func TestFloorReceivesHashesAndStoresEveryByte(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	source := filepath.Join(dir, "source.bin")
	const size = 3<<20 + 12345
	sum, err := writeSource(source, size)
	require.NoError(t, err)
	cpu, got, err := floorOnce(context.Background(), source, filepath.Join(dir, "floor"), size, 1<<20)
	require.NoError(t, err)
	require.Equal(t, sum, got, "the floor hashed exactly the source's bytes")
	require.Positive(t, cpu, "the receiving thread's CPU is measured")
	_, err = os.Stat(filepath.Join(dir, "floor"))
	require.ErrorIs(t, err, os.ErrNotExist, "the floor's store is removed")
}
