package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/flagenv"
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

// envValue is a value for flag f, different from its default, that its
// type parses (and that the checks of the global flags accept).
func envValue(f *pflag.Flag) string {
	switch f.Name {
	case "output":
		return "json"
	case "log-level":
		return "debug"
	case "log-format":
		return "json"
	}
	switch f.Value.Type() {
	case "bool":
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	case "int", "int32", "int64", "int32Slice", "intSlice":
		return "7"
	case "duration":
		return "7s"
	}
	return "from-env"
}

// TestCLIEveryFlagReadsItsVariable walks the command tree: every flag of
// every command reads $SLUICE_<FLAG> when the command line leaves it unset
// (as the root help promises; $SLUICE_ACKS and $SLUICE_PARTITIONS were
// ignored), and shows the variable in its help, except exactly the flags
// the root help names.
func TestCLIEveryFlagReadsItsVariable(t *testing.T) {
	a := &app{}
	type flagOf struct{ path, name string }
	var all []flagOf
	walk(a.rootCommand(), func(c *cobra.Command) {
		fs, path := c.LocalNonPersistentFlags(), strings.TrimPrefix(c.CommandPath(), "sluice")
		if !c.HasParent() {
			fs, path = c.PersistentFlags(), " tenant get" // the global flags, through a command that uses them
		}
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				all = append(all, flagOf{path, f.Name})
			}
		})
	})
	require.Greater(t, len(all), 100)
	excluded := 0
	for _, fl := range all {
		root := (&app{}).rootCommand()
		cmd, _, err := root.Find(strings.Fields(fl.path))
		require.NoError(t, err)
		require.NoError(t, cmd.ParseFlags(nil))
		f := cmd.Flags().Lookup(fl.name)
		env := flagenv.Name(envPrefix, fl.name)
		value := envValue(f)
		t.Setenv(env, value)
		err = root.PersistentPreRunE(cmd, nil)
		os.Unsetenv(env)
		require.NoError(t, err, "sluice%s --%s from $%s=%s", fl.path, fl.name, env, value)
		path := strings.TrimSpace(fl.path)
		if noEnv(path, fl.name) {
			excluded++
			require.False(t, f.Changed, "sluice%s --%s must not read $%s", fl.path, fl.name, env)
			require.NotContains(t, f.Usage, "[$", "sluice%s --%s", fl.path, fl.name)
			if !slices.Contains(noEnvCommands, path) {
				require.Contains(t, root.Long, "--"+fl.name, "the root help names the flags without a variable")
			}
			continue
		}
		require.True(t, f.Changed, "sluice%s --%s does not read $%s", fl.path, fl.name, env)
		require.Contains(t, f.Value.String(), value, "sluice%s --%s from $%s", fl.path, fl.name, env)
		require.Contains(t, f.Usage, "[$"+env+"]", "sluice%s --%s shows its variable", fl.path, fl.name)
	}
	require.Greater(t, excluded, 0)
	for _, c := range noEnvCommands {
		require.Contains(t, strings.Join(strings.Fields((&app{}).rootCommand().Long), " "), c)
	}
}

// TestCLIVariablesReachTheCommand: the variables of command flags are
// applied when the command runs, and a usage error names the variables
// that set flags.
func TestCLIVariablesReachTheCommand(t *testing.T) {
	t.Setenv("SLUICE_ACKS", "bogus")
	_, errOut, code := run(t, "produce", "orders", "--value", "x")
	require.Equal(t, ExitUsage, code, errOut)
	require.Contains(t, errOut, `sluice: acks "bogus": choose all, 1 or 0`)
	require.Contains(t, errOut, "sluice: flags set from the environment: --acks ($SLUICE_ACKS)")

	t.Setenv("SLUICE_PARTITIONS", "six")
	_, errOut, code = run(t, "topic", "create", "orders")
	require.Equal(t, ExitUsage, code, errOut)
	require.Contains(t, errOut, "$SLUICE_PARTITIONS (for --partitions)")

	// The command line wins.
	_, errOut, code = run(t, "produce", "orders", "--value", "x", "--acks", "2")
	require.Equal(t, ExitUsage, code, errOut)
	require.Contains(t, errOut, `acks "2"`)
	require.NotContains(t, errOut, "from the environment")
}
