package e2e

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestCLIEdges runs the CLI edges a new user trips on (issue 13)
// against one `sluice dev`: each subtest is one edge.
func TestCLIEdges(t *testing.T) {
	t.Parallel()
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

	// A record between the SDK's 256 KiB batch size and the topic's
	// max.message.bytes is written (in a batch of its own); one over the
	// topic's limit is refused, naming it.
	t.Run("record up to max.message.bytes", func(t *testing.T) {
		mustCLI(t, cfgPath, dev("topic", "create", "big", "-p", "1")...)
		big := strings.Repeat("b", 600<<10)
		out, errOut, code := cliIn(t, cfgPath, big+"\n", dev("produce", "big")...)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "partition=0 offset=0\n", out)
		out, errOut, code = cli(t, cfgPath, dev("consume", "big", "-n", "1", "--format", `%v`)...)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, len(big), len(out))
		require.Equal(t, big, out)

		// Just below the 1 MiB limit with the framing: written; just over: refused.
		_, errOut, code = cliIn(t, cfgPath, strings.Repeat("c", 1<<20-100)+"\n", dev("produce", "big")...)
		require.Equal(t, 0, code, errOut)
		_, errOut, code = cliIn(t, cfgPath, strings.Repeat("c", 1<<20-50)+"\n", dev("produce", "big")...)
		require.Equal(t, 1, code, errOut)
		require.Contains(t, errOut, `record 1: invalid_argument: record too large: about 1048608 bytes in its batch; topic "big" takes batches up to its max.message.bytes, 1048576`)
		// The topic's own limit, when lowered, is the one cited.
		mustCLI(t, cfgPath, dev("topic", "alter", "big", "--config", "max.message.bytes=102400")...)
		_, errOut, code = cliIn(t, cfgPath, strings.Repeat("d", 200<<10)+"\n", dev("produce", "big")...)
		require.Equal(t, 1, code, errOut)
		require.Contains(t, errOut, `record 1: record too large: a line of 204800 bytes; topic "big" takes records up to its max.message.bytes, 102400`)
	})

	// Non-group consume stops at the end (the README's --offset @TIME
	// example blocked forever on an empty partition); --follow goes on.
	t.Run("consume ends", func(t *testing.T) {
		mustCLI(t, cfgPath, dev("topic", "create", "ends", "-p", "3")...)
		at := "@" + time.Now().UTC().Format(time.RFC3339)
		start := time.Now()
		_, errOut, code := cli(t, cfgPath, dev("consume", "ends", "--offset", at, "-o", "json")...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "consumed 0 records")
		require.Less(t, time.Since(start), 20*time.Second, "an empty topic ends at once")
		_, errOut, code = cli(t, cfgPath, dev("consume", "ends")...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "consumed 0 records")

		mustCLIIn(t, cfgPath, "1\n2\n3\n4\n5\n", dev("produce", "ends", "-q")...)
		out, errOut, code := cli(t, cfgPath, dev("consume", "ends")...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "consumed 5 records")
		require.ElementsMatch(t, []string{"1", "2", "3", "4", "5"}, strings.Fields(out))
		// -n stops sooner.
		out, _, code = cli(t, cfgPath, dev("consume", "ends", "-n", "2")...)
		require.Equal(t, 0, code)
		require.Len(t, strings.Fields(out), 2)

		// --follow prints what is written after it started, until Ctrl-C.
		f := startCLI(t, cfgPath, dev("consume", "ends", "--follow", "--offset", "latest")...)
		testenv.Wait(t, 30*time.Second, "follow to print a new record", func() error {
			mustCLI(t, cfgPath, dev("produce", "ends", "--value", "new", "--partition", "1")...)
			if !strings.Contains(f.stdout.String(), "new\n") {
				return errors.New("not yet")
			}
			return nil
		})
		require.NoError(t, f.cmd.Process.Signal(syscall.SIGINT))
		require.Equal(t, 0, f.wait(t, 30*time.Second), f.stderr.String())

		_, errOut, code = cli(t, cfgPath, dev("consume", "ends", "--offset", "latest")...)
		require.Equal(t, 2, code)
		require.Contains(t, errOut, "add --follow")
	})

	// Shell completion offers the tenant's topic and group names from the
	// server (cobra's hidden __complete command is what the shells run),
	// and nothing, quietly, without credentials or a server.
	t.Run("completion", func(t *testing.T) {
		mustCLI(t, cfgPath, dev("topic", "create", "comp-a", "-p", "1")...)
		mustCLI(t, cfgPath, dev("topic", "create", "comp-b", "-p", "1")...)
		mustCLI(t, cfgPath, dev("produce", "comp-a", "--value", "c")...)
		mustCLI(t, cfgPath, dev("consume", "comp-a", "--group", "comp-group", "-n", "1")...)
		complete := func(args ...string) []string {
			t.Helper()
			out, errOut, code := cli(t, cfgPath, append([]string{"__complete"}, args...)...)
			require.Equal(t, 0, code, errOut)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.Equal(t, ":4", lines[len(lines)-1], "no file names offered: %q", out)
			require.NotContains(t, errOut, "sluice:", "no error shown")
			return lines[:len(lines)-1]
		}
		p := func(args ...string) []string { return append([]string{"--profile", "dev"}, args...) }
		require.Equal(t, []string{"comp-a", "comp-b"}, complete(p("topic", "describe", "comp")...))
		require.Contains(t, complete(p("topic", "describe", "")...), "edges")
		require.Equal(t, []string{"comp-a", "comp-b"}, complete(p("consume", "comp")...))
		require.Equal(t, []string{"comp-a", "comp-b"}, complete(p("produce", "comp-")...))
		require.Empty(t, complete(p("topic", "describe", "comp-a", "")...), "one topic only")
		require.Equal(t, []string{"comp-group"}, complete(p("group", "describe", "comp")...))
		require.Equal(t, []string{"comp-group"}, complete(p("consume", "edges", "--group", "comp")...))
		require.Equal(t, []string{"comp-group"}, complete(p("alerts", "list", "--group", "")...))
		require.Equal(t, []string{"comp-a", "comp-b"}, complete(p("group", "reset-offsets", "comp-group", "--topic", "comp")...))

		// Not logged in, or the server down: nothing, at once, no error.
		start := time.Now()
		require.Empty(t, complete("--profile", "nobody", "topic", "describe", ""))
		require.Empty(t, complete("--endpoint", "http://"+testcluster.FreeAddr(t), "--api-key", "slk_0123456789abcdef_x", "topic", "describe", ""))
		require.Empty(t, complete("--endpoint", "http://"+testcluster.FreeAddr(t), "--api-key", "slk_0123456789abcdef_x", "group", "lag", ""))
		require.Less(t, time.Since(start), 20*time.Second)
	})

	// -o json: one style (the API's protojson: camelCase, no double
	// spaces) for every command, errors as JSON on stderr.
	t.Run("json", func(t *testing.T) {
		mustCLI(t, cfgPath, dev("webhook", "create", "http://127.0.0.1:9/hook")...)
		for _, args := range [][]string{
			{"tenant", "get"},
			{"topic", "create", "json-style", "-p", "2", "--config", "retention.ms=3600000"},
			{"topic", "list"},
			{"topic", "describe", "json-style"},
			{"topic", "alter", "json-style", "--config", "retention.ms=7200000"},
			{"apikey", "create", "--name", "json"},
			{"apikey", "list"},
			{"group", "list"},
			{"alerts", "list"},
			{"alerts", "policy"},
			{"webhook", "list"},
			{"topic", "delete", "json-style"},
		} {
			out, errOut, code := cli(t, cfgPath, dev(append(args, "-o", "json")...)...)
			require.Equal(t, 0, code, "%q: %s", args, errOut)
			requireJSONStyle(t, out, args)
		}
		for _, args := range [][]string{
			{"produce", "edges", "--value", "j1", "--value", "j2"},
			{"consume", "edges", "-n", "2"},
		} {
			out, errOut, code := cli(t, cfgPath, dev(append(args, "-o", "json")...)...)
			require.Equal(t, 0, code, "%q: %s", args, errOut)
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				requireJSONStyle(t, l, args)
			}
		}
		// Errors: the Connect code and the message, on stderr, one line.
		out, errOut, code := cli(t, cfgPath, dev("topic", "describe", "nope", "-o", "json")...)
		require.Equal(t, 4, code)
		require.Empty(t, out)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(errOut), &e), errOut)
		require.Equal(t, "not_found", e.Error.Code)
		require.Contains(t, e.Error.Message, `topic "nope" not found`)
		_, errOut, code = cli(t, cfgPath, dev("topic", "create", "edges", "-o", "json")...)
		require.Equal(t, 5, code)
		require.Contains(t, errOut, `{"error":{"code":"already_exists","message":`)
	})

	// Human output: messages, summaries and errors have no double spaces
	// (only tables and key: value lines align with them).
	t.Run("no double spaces", func(t *testing.T) {
		for _, args := range [][]string{
			{"produce", "edges", "--value", "x"},
			{"consume", "edges", "-n", "1"},
			{"topic", "describe", "nope"},
			{"topic", "create", "edges"},
			{"topic", "lst"},
			{"produce", "edges", "--acks", "2"},
			{"topic", "create", "gone", "-p", "1"},
			{"topic", "delete", "gone"},
		} {
			out, errOut, _ := cli(t, cfgPath, dev(args...)...)
			for _, l := range strings.Split(errOut, "\n") {
				require.NotContains(t, l, "  ", "%q: stderr line %q", args, l)
			}
			if args[1] == "delete" || args[0] == "produce" {
				require.NotContains(t, strings.TrimLeft(out, " "), "  ", "%q: stdout %q", args, out)
			}
		}
	})
}

// requireJSONStyle checks text is -o json as docs/cli.md says: valid JSON,
// lowerCamelCase keys, no double space but in the indentation.
func requireJSONStyle(t *testing.T, text string, args []string) {
	t.Helper()
	require.True(t, json.Valid([]byte(text)), "%q: %s", args, text)
	var v any
	require.NoError(t, json.Unmarshal([]byte(text), &v))
	requireKeyStyle(t, v, false, args)
	for _, l := range strings.Split(text, "\n") {
		require.NotContains(t, strings.TrimLeft(l, " "), "  ", "%q: a double space in %q", args, l)
	}
}

// requireKeyStyle checks every field name in v is lowerCamelCase. The keys
// of a "values" object are not field names but the names of limits and
// usage dimensions (a proto map keyed by them: limit/table.go), spelled
// snake_case everywhere.
func requireKeyStyle(t *testing.T, v any, names bool, args []string) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if names {
				require.Regexp(t, `^[a-z][a-z0-9_]*$`, k, "%q: name %q is not snake_case", args, k)
			} else {
				require.Regexp(t, `^[a-z][A-Za-z0-9]*$`, k, "%q: key %q is not lowerCamelCase", args, k)
			}
			requireKeyStyle(t, e, !names && k == "values", args)
		}
	case []any:
		for _, e := range v {
			requireKeyStyle(t, e, false, args)
		}
	}
}
