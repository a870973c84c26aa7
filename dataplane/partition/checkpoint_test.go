package partition

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPartitionHWCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hw, err := readHW(dir)
	require.NoError(t, err)
	require.Zero(t, hw, "no checkpoint yet")
	require.NoError(t, writeHW(dir, 42))
	hw, err = readHW(dir)
	require.NoError(t, err)
	require.EqualValues(t, 42, hw)
	require.NoError(t, writeHW(dir, 43))
	hw, err = readHW(dir)
	require.NoError(t, err)
	require.EqualValues(t, 43, hw)
	require.NoError(t, os.WriteFile(filepath.Join(dir, hwCheckpointName), []byte("garbage"), 0o644))
	_, err = readHW(dir)
	require.Error(t, err)
}
