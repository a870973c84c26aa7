// Package scenario runs scripted scenario tests: files of blocks, each a
// few commands followed by a line "----" and the output they must print,
// blocks separated by a blank line. Lines starting with # are comments.
// The state machines of dataplane/replica, dataplane/group and
// dataplane/txn are driven this way from their testdata/*.txt.
//
// After a change of behaviour, regenerate the expected output with
//
//	go test ./<package> -run <Test> -rewrite
//
// (or SLUICE_REWRITE=1) and review the diff.
package scenario

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt scenarios")

// Script is one scenario file's world, fresh per file.
type Script struct {
	// Exec runs one command, printing to Out what it shows.
	Exec func(cmd string) error
	// Out collects what the commands print; it is reset before each block.
	Out interface {
		String() string
		Reset()
	}
	// Check, when set, runs after each command that succeeded: an error
	// is a broken invariant.
	Check func(cmd string) error
}

// Run runs every file matching pattern (at least one must) as a parallel
// subtest named after it, each in a Script from newScript, and compares
// each block's output with the file's; with -rewrite it writes the output
// into the file instead.
func Run(t *testing.T, pattern string, newScript func(t *testing.T) Script) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenario matches %s", pattern)
	}
	doRewrite := *rewrite || os.Getenv("SLUICE_REWRITE") != ""
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), func(t *testing.T) {
			t.Parallel()
			runFile(t, path, newScript(t), doRewrite)
		})
	}
}

func runFile(t *testing.T, path string, s Script, doRewrite bool) {
	blocks := parse(t, path)
	var rewritten strings.Builder
	for _, b := range blocks {
		s.Out.Reset()
		for i, l := range b.lines {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if err := s.Exec(l); err != nil {
				t.Fatalf("%s:%d: %s: %v\noutput so far:\n%s", path, b.line+i, l, err, s.Out.String())
			}
			if s.Check != nil {
				if err := s.Check(l); err != nil {
					t.Fatalf("%s:%d: %s: invariant: %v\noutput so far:\n%s", path, b.line+i, l, err, s.Out.String())
				}
			}
		}
		got := strings.TrimRight(s.Out.String(), "\n")
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
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type block struct {
	lines    []string // comments and commands, verbatim
	line     int      // 1-based line of the first command
	expected string
}

func parse(t *testing.T, path string) []block {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
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
	if !inOutput && cur.line != 0 {
		t.Fatalf("%s:%d: commands without ---- after them", path, cur.line)
	}
	flush()
	return blocks
}
