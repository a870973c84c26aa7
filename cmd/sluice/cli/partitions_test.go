package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLITopicAlterPartitionsUsage: `topic alter --partitions` is refused
// before any request when combined with --config (two separate changes,
// one of them final) or below 1, and `topic alter` with neither says what
// to give; the help says partitions are never removed and keys move.
func TestCLITopicAlterPartitionsUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"topic", "alter", "orders", "--partitions", "12", "--config", "retention.ms=1000"}, "--partitions and --config are separate changes"},
		{[]string{"topic", "alter", "orders", "-p", "0"}, "--partitions 0: give the new total partition count"},
		{[]string{"topic", "alter", "orders", "--partitions", "-2"}, "--partitions -2"},
		{[]string{"topic", "alter", "orders"}, "give --config key=value to change config, or --partitions N to add partitions"},
		{[]string{"topic", "alter", "orders", "--partitions", "many"}, `invalid argument "many" for "-p, --partitions"`},
	} {
		out, errOut, code := run(t, tt.args...)
		require.Equal(t, ExitUsage, code, "%v: stdout %s stderr %s", tt.args, out, errOut)
		require.Contains(t, errOut, tt.msg, "%v", tt.args)
	}
	out, _, code := run(t, "topic", "alter", "--help")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "--partitions int32")
	require.Contains(t, out, "never removed")
	require.Contains(t, out, "sluice topic alter orders --partitions 12")
}
