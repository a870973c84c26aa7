package e2e

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// TestE2ECLIEdges runs the CLI edges a new user trips on (issue 13)
// against one `sluice dev`: each subtest is one edge.
func TestE2ECLIEdges(t *testing.T) {
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr)
	dev := func(args ...string) []string { return append([]string{"--profile", "dev"}, args...) }
	mustCLI(t, cfgPath, dev("topic", "create", "edges", "-p", "1")...)

	// "produced 1 records": one record is a record.
	t.Run("plural", func(t *testing.T) {
		_, errOut, code := cli(t, cfgPath, dev("produce", "edges", "--value", "one")...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "produced 1 record to edges (0 failed)\n")
		_, errOut, code = cli(t, cfgPath, dev("consume", "edges", "-n", "1")...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "consumed 1 record\n")
		_, errOut, code = cli(t, cfgPath, dev("produce", "edges", "--value", "a", "--value", "b")...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "produced 2 records to edges (0 failed)\n")
	})
}
