package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// run executes the CLI in-process with a private config file and returns
// stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"--cli-config", filepath.Join(t.TempDir(), "config.json")}, args...)
	code := Execute(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// walk calls fn for every command of the tree below (and with) root.
func walk(root *cobra.Command, fn func(*cobra.Command)) {
	fn(root)
	for _, c := range root.Commands() {
		walk(c, fn)
	}
}

// TestCLIUnknownSubcommand: a word that names no subcommand of a command
// group (sluice topic lst, sluice group bogus) is a usage error, exit 2,
// worded like an unknown top-level command; every group of the tree.
func TestCLIUnknownSubcommand(t *testing.T) {
	a := &app{}
	var groups [][]string
	walk(a.rootCommand(), func(c *cobra.Command) {
		if c.HasSubCommands() {
			path := strings.Fields(c.CommandPath())[1:]
			groups = append(groups, path)
		}
	})
	require.GreaterOrEqual(t, len(groups), 8, "root, topic, group, alerts, alerts policy, apikey, tenant, webhook …")
	for _, path := range groups {
		name := strings.Join(append([]string{"sluice"}, path...), " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, errOut, code := run(t, append(path, "bogus")...)
			require.Equal(t, ExitUsage, code, "stdout: %s\nstderr: %s", out, errOut)
			require.Contains(t, errOut, `sluice: unknown command "bogus" for "`+name+`"`)
			require.Empty(t, out, "no help on stdout for a mistake")
			if name == "sluice alerts policy" || name == "sluice" {
				return // runs on its own (shows the policy), or is the root
			}
			// Without an argument a group still shows its help.
			out, _, code = run(t, path...)
			require.Equal(t, ExitOK, code)
			require.Contains(t, out, "Available Commands:")
		})
	}
	_, errOut, code := run(t, "topic", "lst")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "unknown command \"lst\" for \"sluice topic\"\n\nDid you mean this?\n\tlist\n")
}

func TestCLIPlural(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0 records", plural(0, "record"))
	require.Equal(t, "1 record", plural(1, "record"))
	require.Equal(t, "2 records", plural(int64(2), "record"))
}
