package testrules

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sleepKinds are the reasons a test may sleep (doc.go).
var sleepKinds = []string{"poll", "pacing", "fault", "window", "absence", "backoff", "clock"}

// sleepRule matches a time.Sleep call whose line has a comment naming one
// of sleepKinds.
var sleepRule = regexp.MustCompile(`//\s*(` + strings.Join(sleepKinds, "|") + `):`)

func TestNoSleepAsSynchronisation(t *testing.T) {
	files := testFiles(t)
	if len(files) < 50 {
		t.Fatalf("found %d test files: run from inside the repository", len(files))
	}
	n := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(src, []byte("\n")) {
			if bad, ok := checkSleep(string(line)); ok {
				n++
				if bad {
					t.Errorf("%s:%d: time.Sleep without a `// <kind>:` comment (%s): wait on a condition instead (testenv.Wait), or say why it is not synchronisation\n\t%s",
						f, i+1, strings.Join(sleepKinds, ", "), strings.TrimSpace(string(line)))
				}
			}
		}
	}
	t.Logf("%d sleeps in %d test files, each of a kind that is not synchronisation", n, len(files))
}

// checkSleep reports whether line calls time.Sleep (ok) and, if so,
// whether it lacks a comment naming its kind (bad).
func checkSleep(line string) (bad, ok bool) {
	code, comment, _ := strings.Cut(line, "//")
	if !strings.Contains(code, "time.Sleep(") {
		return false, false
	}
	return !sleepRule.MatchString("//" + comment), true
}

// TestCheckSleepFindsAViolation checks the checker on made-up lines, so
// that a rule that never matches does not pass quietly.
func TestCheckSleepFindsAViolation(t *testing.T) {
	for _, c := range []struct {
		line    string
		bad, ok bool
	}{
		{"\ttime.Sleep(time.Second)", true, true},
		{"\ttime.Sleep(time.Second) // let it settle", true, true},
		{"\ttime.Sleep(time.Second) // fault: the broker stays paused", false, true},
		{"\tfor ; ; time.Sleep(time.Millisecond) { // poll: until the goroutines end", false, true},
		{"\t// time.Sleep(time.Second) would be wrong here", false, false},
		{"\tdeadline := time.Now().Add(time.Second)", false, false},
	} {
		bad, ok := checkSleep(c.line)
		if bad != c.bad || ok != c.ok {
			t.Errorf("checkSleep(%q) = %v, %v; want %v, %v", c.line, bad, ok, c.bad, c.ok)
		}
	}
}

// testFiles lists the module's _test.go files (this package's own, whose
// table quotes bad lines, excepted).
func testFiles(t *testing.T) []string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod two levels up from internal/testrules: %v", err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "bin" || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") && filepath.Base(filepath.Dir(path)) != "testrules" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
