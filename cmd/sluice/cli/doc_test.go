package cli

// The README, docs/ and the Helm chart's README are claims about this tree and
// this command line, so they are tested here: every relative link resolves
// (and every #anchor names a heading), and every `sluice …` command line in
// their code blocks, and every `sluice …` code span in their prose, names a
// real command with real flags. The test lives in package cli because the
// command check needs the real cobra tree (rootCommand) and nothing may import
// cmd/; the link check sits beside it so that `go test ./...` runs one doc test.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/flagenv"
	"github.com/sluicemq/sluice/limit"
)

// TestDocLinks: every relative link and image of the docs (loadDocs) points
// at a file or folder of the repository, and every #anchor at a heading of
// the target (GitHub's anchor rules).
func TestDocLinks(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	docs := loadDocs(t, root)
	tracked := trackedFiles(root)
	var problems []string
	for _, d := range docs {
		problems = append(problems, checkLinks(root, d, docs, tracked)...)
	}
	require.Empty(t, problems, "broken links in the docs:\n%s", strings.Join(problems, "\n"))
}

// TestDocCommands: every `sluice …` command line in a shell code block of
// the docs (loadDocs; also after a `$ ` prompt, across `\` continuations,
// after a pipe or `&&`, behind `VAR=…` prefixes, as `go run ./cmd/sluice …`
// and as `make dev ARGS='…'`) resolves to a command of the real CLI, with
// flags that command knows and values they accept, and exits 0 with --help.
func TestDocCommands(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	var problems []string
	n := 0
	for _, d := range loadDocs(t, root) {
		for _, c := range docCommands(d) {
			n++
			problems = append(problems, checkCommand(c)...)
		}
	}
	require.Greater(t, n, 20, "the docs' command lines were found")
	require.Empty(t, problems, "command lines in the docs that the CLI does not accept:\n%s", strings.Join(problems, "\n"))
}

// TestDocInlineCommands: every code span in the docs' prose that starts with
// `sluice ` (or a path to it, `bin/sluice `) names a real command path with
// flags it knows, as TestDocCommands checks command lines, more leniently:
// prose names a command without all its arguments (`sluice consume`) or a
// flag without its value (`sluice consume --group`); UPPER-CASE words and
// <angle> words are placeholders (an argument, or a flag's value); words in
// [brackets] are optional parts, checked like the rest; `a|b` stands for each
// alternative; and … (or ...) ends what is checked: a command or flag after
// it is not. Arguments beyond what the command takes still fail.
func TestDocInlineCommands(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	var problems []string
	n := 0
	for _, d := range loadDocs(t, root) {
		for _, c := range inlineCommands(d) {
			n++
			problems = append(problems, checkCommand(c)...)
		}
	}
	require.Greater(t, n, 50, "the docs' inline commands were found")
	require.Empty(t, problems, "commands quoted in the docs' prose that the CLI does not accept:\n%s", strings.Join(problems, "\n"))
}

// otherTools' flags appear in the docs' prose as code spans of their own.
var otherToolsFlags = map[string]bool{
	"set": true, // helm install --set, in the chart's README and deploy.md
}

// TestDocFlags: a code span in the docs' prose that starts with a long flag
// (`--group`, `--flush always`) names a flag of some sluice command, so a
// flag renamed or never made fails here even where no command is quoted.
func TestDocFlags(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	known := sluiceFlags()
	var problems []string
	n := 0
	for _, d := range loadDocs(t, root) {
		problems = append(problems, checkFlagSpans(d, known, &n)...)
	}
	require.Greater(t, n, 100, "the docs' flag spans were found")
	require.Empty(t, problems, "flags the docs name that no sluice command has:\n%s", strings.Join(problems, "\n"))
}

var flagSpanRe = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)`)

// checkFlagSpans returns "file:line: --name" for each flag span of d that
// names no flag in known, and counts the flag spans in n.
func checkFlagSpans(d doc, known map[string]bool, n *int) []string {
	var problems []string
	paragraphs(d, func(first int, text string) {
		for _, sp := range codeSpans(text) {
			m := flagSpanRe.FindStringSubmatch(strings.TrimSpace(sp.content))
			if m == nil {
				continue
			}
			*n++
			if !known[m[1]] && !otherToolsFlags[m[1]] {
				problems = append(problems, fmt.Sprintf("%s:%d: --%s is a flag of no sluice command", d.path, first+strings.Count(text[:sp.start], "\n"), m[1]))
			}
		}
	})
	return problems
}

// sluiceFlags is every long flag of every sluice command.
func sluiceFlags() map[string]bool {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	root := a.rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	known := map[string]bool{"help": true}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return known
}

// TestDocPlanFigures: the tables of the plans' limits in the docs (a table
// with free and pro columns) hold every limit once, by its name (`max_topics`)
// or by its label in `sluice tenant get` (topics), with the figures of the
// limit table (package limit), however they are written: 1,000 or 1000,
// 5 MiB/s or 5.00 MiB/s, 7 days or 7d, and anything after " (".
func TestDocPlanFigures(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	for _, name := range []string{"docs/topics-and-quotas.md", "docs/quotas-and-billing.md"} {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		require.NoError(t, err)
		problems := checkPlanFigures(name, string(b))
		require.Empty(t, problems, "plan figures in %s that are not the limit table's:\n%s", name, strings.Join(problems, "\n"))
	}
}

// TestDocPlanFiguresFindsPlantedErrors: the figure check fails on the
// table docs/topics-and-quotas.md had before issue 31 (its "storage" row
// held the max partition bytes) and on rows it cannot read.
func TestDocPlanFiguresFindsPlantedErrors(t *testing.T) {
	t.Parallel()
	table := strings.Join([]string{
		"| limit | free | pro |",
		"| --- | --- | --- |",
		"| topics | 10 | 1,000 |",
		"| storage | 10 GiB | 10 TiB |",
		"| `max_retention_ms` | 7 days | 90 GiB |",
		"| max message | 1 MiB | 8 MiB |",
		"| `max_topics` | 10 | 1000 |",
		"",
		"| limit | free | pro |",
		"| --- | --- | --- |",
		"| not read | the first table counts | |",
	}, "\n")
	problems := checkPlanFigures("planted.md", table)
	for _, want := range []string{
		`planted.md: max_total_storage_bytes on free is "10 GiB"; the limit table says 53687091200 (tenant get: 50.0 GiB)`,
		`planted.md: max_total_storage_bytes on pro is "10 TiB"; the limit table says 109951162777600 (tenant get: 100 TiB)`,
		`planted.md: max_retention_ms on pro is "90 GiB"; the limit table says 7776000000 (tenant get: 90d)`,
		`planted.md: row "max message" names no limit`,
		`planted.md: max_topics has two rows`,
		`planted.md: no row for max_groups`,
	} {
		require.Contains(t, problems, want)
	}
	for _, p := range problems {
		require.NotContains(t, p, "max_retention_ms on free", "7 days is 7d")
		require.NotContains(t, p, "not read")
	}
	require.Equal(t, []string{"planted.md: no table with free and pro columns"}, checkPlanFigures("planted.md", "| limit | a | b |\n| --- | --- | --- |"))
}

// checkPlanFigures returns what is wrong with text's table of plan limits:
// no such table, a row naming no limit, a limit twice or missing, a figure
// that is not the plan's default.
func checkPlanFigures(name, text string) []string {
	header, rows := planTable(text)
	if header == nil {
		return []string{name + ": no table with free and pro columns"}
	}
	plans := map[string]limit.Values{}
	for _, plan := range limit.Plans() {
		v, err := limit.PlanValues(plan)
		if err != nil {
			return []string{err.Error()}
		}
		plans[plan] = v
	}
	var problems []string
	seen := map[limit.Limit]bool{}
	for _, row := range rows {
		l, ok := limitOfCell(row[0])
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: row %q names no limit", name, row[0]))
			continue
		}
		if seen[l] {
			problems = append(problems, fmt.Sprintf("%s: %s has two rows", name, l))
		}
		seen[l] = true
		for i, col := range header {
			want, ok := plans[col]
			if !ok || i >= len(row) {
				continue
			}
			got, ok := parseFigure(l.Def(), row[i])
			if !ok || got != want[l] {
				problems = append(problems, fmt.Sprintf("%s: %s on %s is %q; the limit table says %s (tenant get: %s)",
					name, l, col, row[i], strconv.FormatInt(want[l], 10), fmtLimit(l.Def(), float64(want[l]), false)))
			}
		}
	}
	for _, l := range limit.All() {
		if !seen[l] {
			problems = append(problems, fmt.Sprintf("%s: no row for %s", name, l))
		}
	}
	return problems
}

// planTable returns the header and rows (cells trimmed) of the first
// Markdown table of text whose header has a free and a pro column.
func planTable(text string) (header []string, rows [][]string) {
	cells := func(line string) []string {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			return nil
		}
		var out []string
		for c := range strings.SplitSeq(strings.Trim(line, "|"), "|") {
			out = append(out, strings.TrimSpace(c))
		}
		return out
	}
	for _, line := range strings.Split(text, "\n") {
		c := cells(line)
		switch {
		case header == nil:
			if slices.Contains(c, limit.PlanFree) && slices.Contains(c, limit.PlanPro) {
				header = c
			}
		case c == nil:
			return header, rows
		case strings.Trim(c[0], "-: ") == "":
			// the delimiter row
		default:
			rows = append(rows, c)
		}
	}
	return header, rows
}

// limitOfCell is the limit a table cell names: `its_name` or its label.
func limitOfCell(cell string) (limit.Limit, bool) {
	if name, ok := strings.CutPrefix(cell, "`"); ok {
		return limit.ByName(strings.TrimSuffix(name, "`"))
	}
	for _, l := range limit.All() {
		if l.Def().Label == cell {
			return l, true
		}
	}
	return 0, false
}

var figureRe = regexp.MustCompile(`^([0-9][0-9,]*(?:\.[0-9]+)?) ?(B|KiB|MiB|GiB|TiB|d|days?)?(?:/(?:s|hour))?$`)

// parseFigure reads a limit's value as the docs write it, in the limit's
// unit: bytes, milliseconds (written in days) or things.
func parseFigure(d limit.Def, cell string) (int64, bool) {
	cell, _, _ = strings.Cut(cell, " (")
	m := figureRe.FindStringSubmatch(strings.TrimSpace(cell))
	if m == nil {
		return 0, false
	}
	x, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
	if err != nil {
		return 0, false
	}
	unit := map[string]float64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"d": 86400e3, "day": 86400e3, "days": 86400e3}[m[2]]
	if (d.Unit == limit.Milliseconds) != (unit == 86400e3) || d.Unit != limit.Bytes && d.Unit != limit.Milliseconds && unit != 1 {
		return 0, false // a duration for a limit of bytes or things, or the other way round
	}
	return int64(math.Round(x * unit)), true
}

// TestDocCheckerFindsPlantedErrors: the checks above fail on a bad link, a
// bad anchor, bad command lines and bad commands quoted in prose (the first
// planted one is what docs/deploy.md said before issue 31), so an empty
// result means something.
func TestDocCheckerFindsPlantedErrors(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	docs := loadDocs(t, root)
	lines := []string{
		"# Planted",
		"See [api](api.md), [missing](no-such-file.md), [bad anchor](api.md#no-such-heading),",
		"[here](#planted), [gone](#gone), [out](../../outside.md) and `[in code](nowhere.md)`, a",
		"[wrapped",
		"link](wrapped.md) and a `code span [across",
		"lines](nowhere.md)`.",
		"",
		"```sh",
		"sluice topic list",
		"```",
		"```console",
		"$ sluice topic lst",
		"sluice: unknown command (output, not a command)",
		"```",
		"```sh",
		"seq 3 | sluice produce orders --no-such-flag",
		"SLUICE_NO_SUCH_FLAG=1 sluice topic list",
		"sluice consume orders \\",
		"  --partition zero",
		"go run ./cmd/sluice bogus",
		"make dev ARGS='--data-dir /tmp/x --listen'",
		"sluice topic list -o yaml",
		"```",
		"",
		"Prose: `sluice alerts webhook deliveries ID` lists a webhook's deliveries, and",
		"`sluice operator reassign` moves replicas; `sluice group describe|bogus` and",
		"`sluice consume TOPIC extra` and `sluice dev --no-such` and `sluice topic list -o yaml` are wrong.",
		"Fine: `sluice webhook deliveries ID`, `sluice consume --group`, `sluice operator …`,",
		"`sluice topic create NAME --partitions N [--replication-factor R] [--config key=value ...]`,",
		"`sluice group list|describe|lag`, `sluice COMMAND --help`, `sluice topic describe <topic>`,",
		"`bin/sluice usage --by day -o FORMAT`, `sluice txn describe ID --tenant TENANT-ID`; not commands:",
		"`sluice`, `sluice_broker_leader_partitions`, `sluice.io/metrics`, `go run ./cmd/sluice`.",
		"Flags: `--group`, `--flush always`, `--set image.tag=1`, `-o json` and `--tz` (no such flag).",
	}
	// at is "docs/planted.md:N" for the line holding s.
	at := func(s string) string {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, s) })
		require.GreaterOrEqual(t, i, 0, s)
		return fmt.Sprintf("docs/planted.md:%d", i+1)
	}
	planted := parseDoc("docs/planted.md", strings.Join(lines, "\n"))

	links := checkLinks(root, planted, append(docs, planted), nil)
	require.Equal(t, []string{
		at("no-such-file.md") + ": (no-such-file.md) docs/no-such-file.md does not exist",
		at("no-such-file.md") + ": (api.md#no-such-heading) docs/api.md has no heading with the anchor #no-such-heading",
		at("#gone") + ": (#gone) docs/planted.md has no heading with the anchor #gone",
		at("#gone") + ": (../../outside.md) points outside the repository",
		at("wrapped.md") + ": (wrapped.md) docs/wrapped.md does not exist",
	}, links)

	var cmds []string
	for _, c := range docCommands(planted) {
		cmds = append(cmds, checkCommand(c)...)
	}
	for _, want := range []string{
		at("topic lst") + `: sluice topic lst: unknown command "lst" for "sluice topic"`,
		at("--no-such-flag") + `: sluice produce orders --no-such-flag: unknown flag: --no-such-flag`,
		at("SLUICE_NO_SUCH_FLAG") + `: SLUICE_NO_SUCH_FLAG=1 sluice topic list: $SLUICE_NO_SUCH_FLAG is read by no flag of "sluice topic list"`,
		at("consume orders") + `: sluice consume orders --partition zero: invalid argument "zero" for "--partition"`,
		at("bogus") + `: sluice bogus: unknown command "bogus" for "sluice"`,
		at("make dev") + `: sluice dev --data-dir /tmp/x --listen: unknown flag: --listen`,
		at("yaml") + `: sluice topic list -o yaml: --output must be table or json`,
	} {
		require.True(t, slices.ContainsFunc(cmds, func(p string) bool { return strings.HasPrefix(p, want) }),
			"want a problem starting %q; got:\n%s", want, strings.Join(cmds, "\n"))
	}
	for _, p := range cmds {
		require.False(t, strings.HasPrefix(p, at("sluice topic list")+":"), "sluice topic list is fine: %s", p)
	}

	var inline []string
	quoted := inlineCommands(planted)
	require.Len(t, quoted, 18, "every sluice span, each alternative once; %v", quoted)
	for _, c := range quoted {
		inline = append(inline, checkCommand(c)...)
	}
	require.Equal(t, []string{
		at("alerts webhook") + `: sluice alerts webhook deliveries ID: unknown command "webhook" for "sluice alerts"`,
		at("operator reassign") + `: sluice operator reassign: unknown command "reassign" for "sluice operator"`,
		at("operator reassign") + `: sluice group bogus: unknown command "bogus" for "sluice group"`,
		at("TOPIC extra") + `: sluice consume TOPIC extra: accepts 1 arg(s), received 2`,
		at("TOPIC extra") + `: sluice dev --no-such: with --help it exits 2: sluice: unknown flag: --no-such`,
		at("TOPIC extra") + `: sluice dev --no-such: unknown flag: --no-such`,
		at("TOPIC extra") + `: sluice topic list -o yaml: --output must be table or json; got "yaml"`,
	}, inline)

	n := 0
	require.Equal(t, []string{at("--tz") + ": --tz is a flag of no sluice command"}, checkFlagSpans(planted, sluiceFlags(), &n))
	require.Equal(t, 4, n, "--group, --flush always, --set …, --tz")
}

// doc is one Markdown file: its prose lines (code blocks blanked, so line
// numbers stay), its fenced code blocks and its heading anchors.
type doc struct {
	path    string // slash-separated, relative to the repository root
	prose   []string
	blocks  []codeBlock
	anchors map[string]bool
}

type codeBlock struct {
	lang  string
	first int // line number of the first line inside the fence
	lines []string
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's directory")
		dir = parent
	}
}

// loadDocs reads README.md, docs/*.md and the Helm chart's README.
func loadDocs(t *testing.T, root string) []doc {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	names = append([]string{filepath.Join(root, "README.md")}, names...)
	names = append(names, filepath.Join(root, "infra", "helm", "sluice", "README.md"))
	var docs []doc
	for _, name := range names {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, name)
		require.NoError(t, err)
		docs = append(docs, parseDoc(filepath.ToSlash(rel), string(b)))
	}
	require.Greater(t, len(docs), 5, "README.md and docs/*.md")
	return docs
}

var (
	fenceRe      = regexp.MustCompile("^\\s*(`{3,}|~{3,})\\s*([^`\\s]*)")
	headingRe    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchorRe = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

func parseDoc(name, text string) doc {
	d := doc{path: name, anchors: map[string]bool{}}
	seen := map[string]int{}
	var open string // the fence of the open code block
	for i, line := range strings.Split(text, "\n") {
		if open != "" {
			d.prose = append(d.prose, "")
			if m := fenceRe.FindStringSubmatch(line); m != nil && m[1][0] == open[0] && len(m[1]) >= len(open) && m[2] == "" {
				open = ""
				continue
			}
			b := &d.blocks[len(d.blocks)-1]
			b.lines = append(b.lines, line)
			continue
		}
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			open = m[1]
			d.blocks = append(d.blocks, codeBlock{lang: strings.ToLower(m[2]), first: i + 2})
			d.prose = append(d.prose, "")
			continue
		}
		d.prose = append(d.prose, line)
		for _, m := range htmlAnchorRe.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			slug := githubSlug(m[2])
			if n := seen[slug]; n > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		}
	}
	return d
}

var (
	inlineLinkRe = regexp.MustCompile(`\[([^\]]*)\]\(([^)]*)\)`)
	htmlTagRe    = regexp.MustCompile(`<[^>]+>`)
)

// githubSlug is the anchor GitHub gives a heading: its text as rendered
// (links by their text, no code marks, emphasis or tags), lower-cased, with
// everything but letters, digits, marks, '-', '_' and spaces dropped and
// each space made a '-'. Repeats get -1, -2 … (parseDoc).
func githubSlug(heading string) string {
	s := inlineLinkRe.ReplaceAllString(heading, "$1")
	s = htmlTagRe.ReplaceAllString(s, "")
	s = strings.NewReplacer("`", "", "*", "").Replace(s)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// codeSpan is one `code span` of a text: its backticks at [start, end), its
// content between them.
type codeSpan struct {
	start, end int
	content    string
}

// codeSpans returns the code spans of text: a run of n backticks opens one,
// the next run of exactly n closes it, and it may span lines.
func codeSpans(text string) []codeSpan {
	var spans []codeSpan
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(text) && text[j] == '`' {
			j++
		}
		n := j - i
		end := -1
		for k := j; k < len(text); {
			if text[k] != '`' {
				k++
				continue
			}
			r := k
			for r < len(text) && text[r] == '`' {
				r++
			}
			if r-k == n {
				end = r
				break
			}
			k = r
		}
		if end < 0 {
			i = j
			continue
		}
		spans = append(spans, codeSpan{start: i, end: end, content: text[j : end-n]})
		i = end
	}
	return spans
}

// stripCodeSpans blanks code spans so that brackets inside them are not
// taken for links. Newlines stay, so offsets keep their line.
func stripCodeSpans(text string) string {
	b := []byte(text)
	for _, sp := range codeSpans(text) {
		for k := sp.start; k < sp.end; k++ {
			if b[k] != '\n' {
				b[k] = ' '
			}
		}
	}
	return string(b)
}

// paragraphs calls f with each paragraph of d's prose (a run of non-blank
// lines, joined by newlines) and the line number of its first line.
func paragraphs(d doc, f func(first int, text string)) {
	for start := 0; start < len(d.prose); {
		end := start
		for end < len(d.prose) && strings.TrimSpace(d.prose[end]) != "" {
			end++
		}
		if end == start {
			start++
			continue
		}
		f(start+1, strings.Join(d.prose[start:end], "\n"))
		start = end
	}
}

var (
	linkRe    = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+[^)]*)?\)`)
	refDefRe  = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?`)
	schemedRe = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// checkLinks returns "file:line: …" for every relative link of d that does
// not resolve. tracked, when not nil, holds the repository's files (git's
// view), so a link to an ignored or stray file fails too.
func checkLinks(root string, d doc, docs []doc, tracked map[string]bool) []string {
	byPath := map[string]doc{}
	for _, o := range docs {
		byPath[o.path] = o
	}
	var problems []string
	// Links may wrap, so scan paragraphs.
	paragraphs(d, func(first int, text string) {
		para := stripCodeSpans(text)
		var targets [][2]int // the target's offsets in para
		for _, m := range linkRe.FindAllStringSubmatchIndex(para, -1) {
			targets = append(targets, [2]int{m[2], m[3]})
		}
		for _, m := range refDefRe.FindAllStringSubmatchIndex(para, -1) {
			targets = append(targets, [2]int{m[2], m[3]})
		}
		for _, at := range targets {
			target := para[at[0]:at[1]]
			if target == "" || schemedRe.MatchString(target) || strings.HasPrefix(target, "//") {
				continue
			}
			if p := checkLink(root, d, target, byPath, tracked); p != "" {
				line := first + strings.Count(para[:at[0]], "\n")
				problems = append(problems, fmt.Sprintf("%s:%d: (%s) %s", d.path, line, target, p))
			}
		}
	})
	return problems
}

func checkLink(root string, d doc, target string, byPath map[string]doc, tracked map[string]bool) string {
	file, frag, _ := strings.Cut(target, "#")
	file, err := url.PathUnescape(file)
	if err != nil {
		return "does not unescape: " + err.Error()
	}
	resolved := d.path
	if file != "" {
		if strings.HasPrefix(file, "/") {
			resolved = path.Clean(strings.TrimPrefix(file, "/"))
		} else {
			resolved = path.Join(path.Dir(d.path), file)
		}
		if resolved == ".." || strings.HasPrefix(resolved, "../") {
			return "points outside the repository"
		}
		info, err := os.Stat(filepath.Join(root, filepath.FromSlash(resolved)))
		if err != nil {
			return fmt.Sprintf("%s does not exist", resolved)
		}
		if tracked != nil && !isTracked(tracked, resolved, info.IsDir()) {
			return fmt.Sprintf("%s is not in the repository (ignored or not added)", resolved)
		}
	}
	if frag == "" || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	td, ok := byPath[resolved]
	if !ok {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(resolved)))
		if err != nil {
			return err.Error()
		}
		td = parseDoc(resolved, string(b))
		byPath[resolved] = td
	}
	if !td.anchors[frag] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", resolved, frag)
	}
	return ""
}

func isTracked(tracked map[string]bool, p string, dir bool) bool {
	if !dir {
		return tracked[p]
	}
	if p == "." {
		return true
	}
	for f := range tracked {
		if strings.HasPrefix(f, p+"/") {
			return true
		}
	}
	return false
}

// trackedFiles is git's list of the repository's files (committed, or new and
// not ignored), or nil outside a git checkout.
func trackedFiles(root string) map[string]bool {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return nil
	}
	files := map[string]bool{}
	for f := range strings.SplitSeq(string(out), "\x00") {
		if f != "" {
			files[f] = true
		}
	}
	return files
}

// docCommand is one sluice invocation found in a doc.
type docCommand struct {
	where string   // file:line
	env   []string // NAME=value assignments before the command
	args  []string // after "sluice"
	// quoted is an inline command as the prose wrote it (one alternative of
	// a|b); its args have placeholders for values filled in (inlineCommands).
	quoted string
	// inline: the command is named in prose, so its required arguments
	// and flags may be left out.
	inline bool
	// prefix: the prose wrote … after it, so its arguments are not checked.
	prefix bool
}

func (c docCommand) String() string {
	if c.quoted != "" {
		return c.quoted
	}
	return strings.TrimSpace(strings.Join(c.env, " ") + " sluice " + strings.Join(c.args, " "))
}

// shellLangs are the code-block languages whose lines are shell commands.
var shellLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true, "zsh": true, "shell-session": true}

// docCommands returns the sluice invocations in d's shell code blocks. In a
// block where some line starts with a "$ " prompt, only those lines are
// commands (the rest is output).
func docCommands(d doc) []docCommand {
	var out []docCommand
	for _, b := range d.blocks {
		if !shellLangs[b.lang] {
			continue
		}
		prompted := slices.ContainsFunc(b.lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "$ ") })
		for i := 0; i < len(b.lines); i++ {
			start, line := i, strings.TrimSpace(b.lines[i])
			if prompted {
				if !strings.HasPrefix(line, "$ ") {
					continue
				}
				line = strings.TrimPrefix(line, "$ ")
			}
			for strings.HasSuffix(line, `\`) && i+1 < len(b.lines) {
				i++
				line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(b.lines[i])
			}
			where := fmt.Sprintf("%s:%d", d.path, b.first+start)
			for _, words := range shellWords(line) {
				if c, ok := sluiceInvocation(words); ok {
					c.where = where
					out = append(out, c)
				}
			}
		}
	}
	return out
}

var (
	inlineStartRe = regexp.MustCompile(`^(?:\S*/)?sluice\s`)
	alternativeRe = regexp.MustCompile(`\S+\|\S+`)
	angleRe       = regexp.MustCompile(`<[^<>\s]+>`)
	placeholderRe = regexp.MustCompile(`^[A-Z][A-Z0-9_]*(?:[-=.:][A-Z0-9_]+)*$`)
)

// inlineCommands returns the commands quoted in d's prose: each code span
// that starts with `sluice ` (or `bin/sluice ` …), one command per
// alternative of an a|b word (written without spaces, so not a pipe).
func inlineCommands(d doc) []docCommand {
	var out []docCommand
	paragraphs(d, func(first int, text string) {
		for _, sp := range codeSpans(text) {
			quoted := strings.Join(strings.Fields(sp.content), " ")
			if !inlineStartRe.MatchString(quoted) {
				continue
			}
			where := fmt.Sprintf("%s:%d", d.path, first+strings.Count(text[:sp.start], "\n"))
			for _, alt := range alternatives(quoted) {
				// <release> is a placeholder, not a redirection.
				for _, words := range shellWords(angleRe.ReplaceAllString(alt, "VALUE")) {
					c, ok := sluiceInvocation(words)
					if !ok {
						continue
					}
					c.where, c.quoted, c.inline = where, alt, true
					c.args, c.prefix = inlineArgs(c.args)
					out = append(out, c)
				}
			}
		}
	})
	return out
}

// alternatives expands the first word of s written a|b|c into s with a,
// with b and with c, recursively.
func alternatives(s string) []string {
	loc := alternativeRe.FindStringIndex(s)
	if loc == nil {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[loc[0]:loc[1]], "|") {
		out = append(out, alternatives(s[:loc[0]]+alt+s[loc[1]:])...)
	}
	return out
}

// isPlaceholder: an UPPER-CASE word (NAME, TENANT-ID, YYYY-MM, KEY=VALUE),
// an elided or shell-expanded one.
func isPlaceholder(w string) bool {
	return placeholderRe.MatchString(w) || strings.Contains(w, "…") || strings.Contains(w, "...") || strings.Contains(w, "$")
}

// inlineArgs makes the arguments of a command quoted in prose checkable:
// brackets around optional parts go, … (or ...) ends the arguments
// checked (prefix) unless it closes an optional part, a placeholder where a subcommand is due ends them too,
// and a placeholder or missing value of a flag becomes a value the flag
// accepts. The command path and flags are found in the real command tree,
// as checkCommand finds them.
func inlineArgs(words []string) (args []string, prefix bool) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	cmd := a.rootCommand()
	positional := false
	for i := 0; i < len(words); i++ {
		w := strings.Trim(words[i], "[]")
		switch {
		case w == "" || (w == "…" || w == "...") && strings.HasSuffix(words[i], "]"):
			continue // [--config key=value ...]: repeatable, not elided
		case w == "…" || w == "...":
			return args, true
		case w == "--" || !strings.HasPrefix(w, "-") || w == "-":
			if sub := subcommand(cmd, w); sub != nil && !positional {
				cmd = sub
			} else if isPlaceholder(w) && cmd.HasAvailableSubCommands() && !cmd.Runnable() {
				return args, true
			} else {
				positional = true
			}
			args = append(args, w)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		f := lookupFlag(cmd, name, !strings.HasPrefix(w, "--"))
		if f == nil || f.NoOptDefVal != "" {
			args = append(args, w) // unknown (checkCommand says so), or needs no value
			continue
		}
		if !hasValue {
			next := ""
			if i+1 < len(words) {
				next = strings.Trim(words[i+1], "[]")
			}
			if next == "" || strings.HasPrefix(next, "-") || next == "…" || next == "..." {
				value = "" // named without its value
			} else {
				value = next
				i++
			}
			if value != "" && !isPlaceholder(value) {
				args = append(args, w, value)
				continue
			}
		} else if !isPlaceholder(value) {
			args = append(args, w)
			continue
		}
		args = append(args, "--"+f.Name+"="+sampleValue(f))
	}
	return args, false
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// lookupFlag finds a flag of cmd, its own or inherited, by name or
// (short) shorthand.
func lookupFlag(cmd *cobra.Command, name string, short bool) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		switch {
		case short && len(name) == 1:
			if f := fs.ShorthandLookup(name); f != nil {
				return f
			}
		case !short:
			if f := fs.Lookup(name); f != nil {
				return f
			}
		}
	}
	return nil
}

// sampleValue is a value f accepts, for a placeholder: its default, or the
// first of a few values of common types. f is set to it (f belongs to a
// command tree made for inlineArgs alone).
func sampleValue(f *pflag.Flag) string {
	for _, v := range []string{f.DefValue, "1", "1s", "1MiB", "x", "a=1"} {
		if v != "[]" && f.Value.Set(v) == nil {
			return v
		}
	}
	return f.DefValue
}

var assignRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// sluiceInvocation recognises `sluice …`, `bin/sluice …`, `go run ./cmd/sluice …`
// and `make dev ARGS='…'`, each after optional VAR=value prefixes.
func sluiceInvocation(words []string) (docCommand, bool) {
	var c docCommand
	for len(words) > 0 && assignRe.MatchString(words[0]) {
		c.env = append(c.env, words[0])
		words = words[1:]
	}
	for len(words) > 0 && slices.Contains([]string{"exec", "time", "nohup", "command"}, words[0]) {
		words = words[1:]
	}
	switch {
	case len(words) == 0:
		return c, false
	case path.Base(words[0]) == "sluice":
		c.args = words[1:]
		return c, true
	case len(words) > 2 && words[0] == "go" && words[1] == "run":
		for i, w := range words[2:] {
			if strings.TrimSuffix(w, "/") == "./cmd/sluice" || w == "github.com/sluicemq/sluice/cmd/sluice" {
				c.args = words[2+i+1:]
				return c, true
			}
		}
	case words[0] == "make" && slices.Contains(words[1:], "dev"):
		c.args = []string{"dev"}
		for _, w := range words[1:] {
			if v, ok := strings.CutPrefix(w, "ARGS="); ok {
				// make hands $(ARGS) to the shell unquoted: split it again.
				for _, ws := range shellWords(v) {
					c.args = append(c.args, ws...)
				}
			}
		}
		return c, true
	}
	return c, false
}

// shellWords splits a command line as a POSIX shell would into simple
// commands (at unquoted |, ||, &&, ; and &) of words, with quotes removed,
// comments and redirections dropped. Expansions ($VAR, $(…)) stay as text.
func shellWords(line string) [][]string {
	var (
		cmds     [][]string
		words    []string
		cur      strings.Builder
		inWord   bool
		quoted   bool // cur holds quoted text (so "2" in "2>" is not an fd)
		skipNext bool // the next word is a redirection's target
	)
	endWord := func() {
		if inWord {
			if skipNext {
				skipNext = false
			} else {
				words = append(words, cur.String())
			}
		}
		cur.Reset()
		inWord, quoted = false, false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case ch == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				end = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord, quoted = true, true
		case ch == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte(`"\$`+"`", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
			inWord, quoted = true, true
		case ch == '#' && !inWord:
			endCmd()
			return cmds
		case ch == ' ' || ch == '\t':
			endWord()
		case ch == '|' || ch == '&' || ch == ';':
			if ch == '&' && i > 0 && line[i-1] == '>' {
				continue // >&2
			}
			endCmd()
			if i+1 < len(line) && line[i+1] == ch {
				i++
			}
		case ch == '<' || ch == '>':
			if inWord && !quoted && strings.Trim(cur.String(), "0123456789") == "" {
				cur.Reset()
				inWord = false // the fd of 2>
			} else {
				endWord()
			}
			for i+1 < len(line) && strings.IndexByte("<>&", line[i+1]) >= 0 {
				i++
			}
			if j := i + 1; j < len(line) && line[i] == '&' {
				for j < len(line) && (line[j] >= '0' && line[j] <= '9' || line[j] == '-') {
					j++
				}
				if j > i+1 {
					i = j - 1
					continue // >&2, 2>&1: no target word
				}
			}
			skipNext = true
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// checkCommand runs c's arguments with --help through the real Execute
// (exit 0, nothing "unknown") and then resolves them as Execute would, more
// strictly: the command path exists (also below a command group, where cobra
// itself would only print help), its flags parse, its positional arguments
// and required flags fit, $SLUICE_* prefixes are variables its flags read,
// and -o names an output format.
func checkCommand(c docCommand) []string {
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s: %s", c.where, c, fmt.Sprintf(format, args...)))
	}

	var out, errOut bytes.Buffer
	code := Execute(context.Background(), append(slices.Clone(c.args), "--help"), strings.NewReader(""), &out, &errOut)
	if code != ExitOK || strings.Contains(errOut.String(), "unknown") {
		fail("with --help it exits %d: %s", code, strings.TrimSpace(errOut.String()))
	}

	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	root := a.rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(c.args)
	if err != nil {
		fail("%v", firstLine(err))
		return problems
	}
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		fail("%v", err)
		return problems
	}
	if help, _ := cmd.Flags().GetBool("help"); help {
		return problems
	}
	pos := cmd.Flags().Args()
	if cmd.HasAvailableSubCommands() && !cmd.Runnable() && len(pos) > 0 {
		fail("unknown command %q for %q", pos[0], cmd.CommandPath())
		return problems
	}
	if err := cmd.ValidateArgs(pos); err != nil && !c.prefix && !(c.inline && missingArgs(cmd, pos)) {
		fail("%v", err)
	}
	for _, kv := range c.env {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix+"_") {
			continue
		}
		var reader *string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if flagenv.Name(envPrefix, f.Name) == name && strings.Contains(f.Usage, "[$"+name+"]") {
				reader = &f.Name
			}
		})
		switch {
		case reader == nil:
			fail("$%s is read by no flag of %q", name, cmd.CommandPath())
		case !cmd.Flags().Changed(*reader):
			if err := cmd.Flags().Set(*reader, value); err != nil {
				fail("$%s: %v", name, err)
			}
		}
	}
	if !c.inline {
		if err := cmd.ValidateRequiredFlags(); err != nil {
			fail("%v", err)
		}
		if err := cmd.ValidateFlagGroups(); err != nil {
			fail("%v", err)
		}
	}
	if err := a.checkOutput(cmd); err != nil {
		fail("%v", err)
	}
	return problems
}

// missingArgs: pos lacks arguments cmd needs, rather than holding ones it
// does not take (up to three more make them valid).
func missingArgs(cmd *cobra.Command, pos []string) bool {
	more := slices.Clone(pos)
	for range 3 {
		more = append(more, "x")
		if cmd.ValidateArgs(more) == nil {
			return true
		}
	}
	return false
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
