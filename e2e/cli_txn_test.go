package e2e

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// TestCLITransactions: sluice produce --transactional-id writes a run
// in one transaction, committed, or aborted when a line is refused;
// consume --isolation read-committed prints only committed records;
// sluice txn list and describe show the ids, with real processes.
func TestCLITransactions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr)
	dev := []string{"--profile", "dev"}
	mustCLI(t, cfgPath, append(dev, "topic", "create", "ledger", "-p", "2")...)

	_, errOut, code := cliIn(t, cfgPath, "a\nb\nc\n", append(dev, "produce", "ledger", "--transactional-id", "import-1", "--quiet")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "produced 3 records to ledger (0 failed) in a transaction: committed")

	// A line without the key separator is refused: the run aborts, also
	// the record written before it.
	_, errOut, code = cliIn(t, cfgPath, "k:x\nnokey\n", append(dev, "produce", "ledger", "--transactional-id", "import-2", "--key-separator", ":", "--quiet")...)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "record 2: no key separator")
	require.Contains(t, errOut, "in a transaction: aborted")

	lines := func(out string) []string {
		l := strings.Fields(out)
		slices.Sort(l)
		return l
	}
	require.Equal(t, []string{"a", "b", "c"}, lines(mustCLI(t, cfgPath, append(dev, "consume", "ledger", "--isolation", "read-committed")...)))
	// A group member reads committed too.
	require.Equal(t, []string{"a", "b", "c"}, lines(mustCLI(t, cfgPath, append(dev, "consume", "ledger", "--group", "auditors",
		"--isolation", "read-committed", "-n", "3", "--timeout", "20s")...)))
	// read-uncommitted also prints x if it was sent before the abort
	// (records still buffered at the abort are failed instead).
	all := lines(mustCLI(t, cfgPath, append(dev, "consume", "ledger")...))
	require.Subset(t, all, []string{"a", "b", "c"})
	require.Subset(t, []string{"a", "b", "c", "x"}, all)

	out := mustCLI(t, cfgPath, append(dev, "txn", "list")...)
	require.Regexp(t, `import-1\s+CompleteCommit`, out)
	require.Regexp(t, `import-2\s+CompleteAbort`, out)
	var desc struct {
		Transaction struct {
			TransactionalID string `json:"transactionalId"`
			State           string `json:"state"`
			ProducerEpoch   int    `json:"producerEpoch"`
			Topics          []struct {
				Topic string `json:"topic"`
			} `json:"topics"`
		} `json:"transaction"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, append(dev, "txn", "describe", "import-1", "-o", "json")...)), &desc))
	require.Equal(t, "import-1", desc.Transaction.TransactionalID)
	require.Equal(t, "TXN_STATE_COMPLETE_COMMIT", desc.Transaction.State)
	require.Equal(t, 1, desc.Transaction.ProducerEpoch, "the commit bumped the epoch")
	require.Len(t, desc.Transaction.Topics, 1)
	require.Equal(t, "ledger", desc.Transaction.Topics[0].Topic)
	out = mustCLI(t, cfgPath, append(dev, "txn", "describe", "import-2")...)
	require.Regexp(t, `state:\s+CompleteAbort`, out)
	_, errOut, code = cli(t, cfgPath, append(dev, "txn", "describe", "nobody")...)
	require.Equal(t, 4, code, errOut)

	// Shell completion offers the transactional ids.
	out, errOut, code = cli(t, cfgPath, append([]string{"__complete"}, append(dev, "txn", "describe", "imp")...)...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "import-1\nimport-2\n:4\n", out)
}
