package replica

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Scenario files (testdata/*.txt) hold blocks: comment lines (#), command
// lines, a "----" line and the expected output up to a blank line. Each file
// runs on a fresh simulated cluster (cluster_test.go); every command is
// followed by an invariant check. Regenerate the expected output with
//
//	go test ./dataplane/replica -run TestReplicaScenario -rewrite
//
// (or SLUICE_REWRITE=1) and review the diff.

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt scenarios")

type block struct {
	lines    []string // comments and commands, verbatim
	line     int      // 1-based line of the first command
	expected string
}

func parseScenario(t *testing.T, path string) []block {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var blocks []block
	var cur block
	inOutput := false
	var out []string
	flush := func() {
		if inOutput {
			cur.expected = strings.Join(out, "\n")
			blocks = append(blocks, cur)
		}
		cur, out, inOutput = block{}, nil, false
	}
	for i, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		switch {
		case inOutput && l == "":
			flush()
		case inOutput:
			out = append(out, l)
		case l == "----":
			inOutput = true
		default:
			if cur.line == 0 && l != "" && !strings.HasPrefix(l, "#") {
				cur.line = i + 1
			}
			if l != "" || len(cur.lines) > 0 {
				cur.lines = append(cur.lines, l)
			}
		}
	}
	flush()
	require.Empty(t, cur.lines, "%s: commands without ---- at the end", path)
	return blocks
}

func TestReplicaScenario(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	doRewrite := *rewrite || os.Getenv("SLUICE_REWRITE") != ""
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			t.Parallel()
			blocks := parseScenario(t, path)
			c := newCluster()
			var rewritten strings.Builder
			for _, b := range blocks {
				c.out.Reset()
				for i, l := range b.lines {
					if l == "" || strings.HasPrefix(l, "#") {
						continue
					}
					if err := c.run(l); err != nil {
						t.Fatalf("%s:%d: %s: %v\noutput so far:\n%s", path, b.line+i, l, err, c.out.String())
					}
				}
				got := strings.TrimRight(c.out.String(), "\n")
				if doRewrite {
					rewritten.WriteString(strings.Join(b.lines, "\n"))
					rewritten.WriteString("\n----\n")
					if got != "" {
						rewritten.WriteString(got + "\n")
					}
					rewritten.WriteString("\n")
					continue
				}
				if got != b.expected {
					t.Errorf("%s:%d: output differs\n--- want\n%s\n--- got\n%s", path, b.line, b.expected, got)
				}
			}
			if doRewrite {
				out := strings.TrimRight(rewritten.String(), "\n") + "\n"
				require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
			}
		})
	}
}
