package cli

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLIMetricsAddrDefaultsToLoopback: the operator listener, whose
// metrics name every tenant, binds loopback unless the operator says
// otherwise, and its flag reads $SLUICE_METRICS_ADDR.
func TestCLIMetricsAddrDefaultsToLoopback(t *testing.T) {
	t.Parallel()
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	root := a.rootCommand()
	for _, name := range []string{"controlplane", "broker"} {
		cmd, _, err := root.Find([]string{name})
		require.NoError(t, err)
		f := cmd.Flags().Lookup("metrics-addr")
		require.NotNil(t, f, "%s has --metrics-addr", name)
		host, port, err := net.SplitHostPort(f.DefValue)
		require.NoError(t, err, name)
		require.True(t, net.ParseIP(host).IsLoopback(), "%s --metrics-addr defaults to %s", name, f.DefValue)
		require.NotEqual(t, "0", port, "%s: a fixed port, to point Prometheus at", name)
		require.Contains(t, f.Usage, "[$SLUICE_METRICS_ADDR]", name)

		l := cmd.Flags().Lookup("listen-addr")
		require.NotEqual(t, l.DefValue, f.DefValue, name)
		require.Contains(t, l.Usage, "serves no metrics", name)
	}
}
