package hwcheckpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHWCheckpointFile: the broker's checkpoint holds every
// partition's HW in one file and reads back what was written; no file is
// no HW yet.
func TestHWCheckpointFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), Name)
	hws, err := Read(path)
	require.NoError(t, err)
	require.Empty(t, hws, "no checkpoint yet")

	want := map[Key]int64{{"topic-b", 0}: 7, {"topic-a", 1}: 0, {"topic-a", 0}: 1 << 40}
	require.NoError(t, Write(path, want))
	got, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, want, got)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "sluice-replication-offset-checkpoint 1\n3\ntopic-a 0 1099511627776\ntopic-a 1 0\ntopic-b 0 7\n", string(data[:bytes.LastIndex(data, []byte("crc32c "))]),
		"sorted, one line per partition")

	require.NoError(t, Write(path, map[Key]int64{}))
	got, err = Read(path)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Error(t, Write(path, map[Key]int64{{"a b", 0}: 1}), "a topic id with a space")
	require.Error(t, Write(path, map[Key]int64{{"a", 0}: -1}))
}

// TestHWCheckpointCorrupt: a checkpoint that fails its checks is
// ErrCorrupt, never read as some other HWs.
func TestHWCheckpointCorrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	require.NoError(t, Write(good, map[Key]int64{{"topic-a", 0}: 12, {"topic-a", 1}: 5}))
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	flipped := bytes.Replace(data, []byte("topic-a 0 12"), []byte("topic-a 0 92"), 1)
	for name, b := range map[string][]byte{
		"empty":          {},
		"garbage":        []byte("garbage"),
		"legacy format":  []byte("42\n"),
		"a digit flips":  flipped,
		"truncated":      data[:len(data)/2],
		"no newline":     data[:len(data)-1],
		"unknown header": withChecksum("sluice-replication-offset-checkpoint 2\n0\n"),
		"count too high": withChecksum("sluice-replication-offset-checkpoint 1\n2\ntopic-a 0 1\n"),
		"bad entry":      withChecksum("sluice-replication-offset-checkpoint 1\n1\ntopic-a 0\n"),
		"negative hw":    withChecksum("sluice-replication-offset-checkpoint 1\n1\ntopic-a 0 -1\n"),
		"duplicate":      withChecksum("sluice-replication-offset-checkpoint 1\n2\ntopic-a 0 1\ntopic-a 0 2\n"),
	} {
		path := filepath.Join(dir, "bad")
		require.NoError(t, os.WriteFile(path, b, 0o644))
		_, err := Read(path)
		require.ErrorIs(t, err, ErrCorrupt, name)
		require.ErrorContains(t, err, path, name)
	}
}

// withChecksum is body with a valid checksum line.
func withChecksum(body string) []byte {
	return append([]byte(body), checksumLine([]byte(body))...)
}
