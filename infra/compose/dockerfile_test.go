package compose

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY …
	args string
	line int
}

type stage struct {
	from, name string
	ins        []instruction
}

// parseDockerfile splits a Dockerfile into stages of instructions (comments dropped, `\`
// continuations joined). It knows no more of the syntax than the root Dockerfile uses.
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	sc := bufio.NewScanner(strings.NewReader(text))
	n, cur, start := 0, "", 0
	flush := func() error {
		line := strings.TrimSpace(cur)
		cur = ""
		if line == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		switch in.cmd {
		case "FROM":
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			return nil
		case "ARG", "RUN", "COPY", "ENV", "WORKDIR", "USER", "HEALTHCHECK", "ENTRYPOINT", "CMD", "LABEL", "EXPOSE":
		default:
			return fmt.Errorf("line %d: instruction %s is not one this parser knows", in.line, in.cmd)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				return fmt.Errorf("line %d: %s before FROM", in.line, in.cmd)
			}
			return nil
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
		return nil
	}
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (l == "" && cur == "") {
			continue
		}
		if cur == "" {
			start = n
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur += s + " "
			continue
		}
		cur += l
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return stages, sc.Err()
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// makeBuildRecipe returns the recipe line of the Makefile's build target.
func makeBuildRecipe(t testing.TB, makefile string) string {
	t.Helper()
	lines := strings.Split(makefile, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "build:") {
			require.Less(t, i+1, len(lines))
			require.True(t, strings.HasPrefix(lines[i+1], "\t"), "the build target has a one-line recipe")
			require.False(t, strings.HasPrefix(lines[i+2], "\t"), "the build target has a one-line recipe")
			return strings.TrimSpace(lines[i+1])
		}
	}
	t.Fatal("the Makefile has no build target")
	return ""
}

var outFlag = regexp.MustCompile(`-o (\S+)`)

// dockerBuildLine returns the build stage's `go build` RUN line and the path it writes the binary to.
func dockerBuildLine(t testing.TB, stages []stage) (run, out string) {
	t.Helper()
	for _, s := range stages[:len(stages)-1] {
		for _, in := range s.ins {
			if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
				m := outFlag.FindStringSubmatch(in.args)
				require.NotNil(t, m, "the build line names its output with -o")
				return in.args, m[1]
			}
		}
	}
	t.Fatal("no build stage RUNs go build")
	return "", ""
}

// binDirPrefix names the folders buildSluice writes into, one per test process (TestMain
// removes those of processes that are gone).
const binDirPrefix = "sluice-compose-bin-"

func sweepBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err == nil && syscall.Kill(pid, 0) != nil {
			_ = os.RemoveAll(d)
		}
	}
}

var (
	sluiceOnce sync.Once
	sluiceBin  string
	sluiceErr  error
)

// buildSluice runs the Dockerfile's build line (as its RUN does: sh -c, VERSION from the build
// argument) in the repository, writing the binary to a folder of its own, once per test binary.
func buildSluice(t testing.TB, version string) string {
	t.Helper()
	sluiceOnce.Do(func() {
		root := repoRoot(t)
		stages, err := parseDockerfile(readFile(t, filepath.Join(root, "Dockerfile")))
		if err != nil {
			sluiceErr = err
			return
		}
		run, out := dockerBuildLine(t, stages)
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", binDirPrefix, os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			sluiceErr = err
			return
		}
		sluiceBin = filepath.Join(dir, "sluice")
		line := strings.Replace(run, "-o "+out, "-o "+sluiceBin, 1)
		cmd := exec.Command("/bin/sh", "-c", line)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "VERSION="+version)
		start := time.Now()
		b, err := cmd.CombinedOutput()
		if err != nil {
			sluiceErr = fmt.Errorf("the Dockerfile's build line %q: %v\n%s", line, err, b)
			return
		}
		t.Logf("built %s with the Dockerfile's build line in %s", sluiceBin, time.Since(start).Round(time.Millisecond))
	})
	require.NoError(t, sluiceErr)
	return sluiceBin
}

// testVersion is what the tests stamp into the binary they build.
const testVersion = "v0.0.0-compose-test"

// TestDockerfile: the Dockerfile builds what `make build` does (the same line, flags and all),
// that line works and stamps the version, and the runtime image runs sluice as non-root with a
// probe that needs no shell.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	stages, err := parseDockerfile(readFile(t, filepath.Join(root, "Dockerfile")))
	require.NoError(t, err)
	require.Len(t, stages, 2, "a build stage and a runtime stage")
	build, runtime := stages[0], stages[1]
	require.Equal(t, "golang:1.26", build.from)
	require.Equal(t, "build", build.name)

	// The build line is the Makefile's recipe with the Dockerfile's names for the version and
	// the output.
	run, out := dockerBuildLine(t, stages)
	recipe := makeBuildRecipe(t, readFile(t, filepath.Join(root, "Makefile")))
	require.Contains(t, recipe, "$(BIN)/sluice")
	want := strings.NewReplacer("$(VERSION)", "${VERSION}", "$(BIN)/sluice", out).Replace(recipe)
	require.Equal(t, want, run, "the Dockerfile's build line must be the Makefile's build recipe")
	require.Contains(t, run, "CGO_ENABLED=0", "a static binary")
	require.True(t, slices.ContainsFunc(build.ins, func(in instruction) bool { return in.cmd == "ARG" && strings.HasPrefix(in.args, "VERSION") }),
		"VERSION is a build argument")

	// The runtime stage.
	require.Equal(t, "gcr.io/distroless/static-debian12:nonroot", runtime.from)
	get := func(cmd string) []instruction {
		var r []instruction
		for _, in := range runtime.ins {
			if in.cmd == cmd {
				r = append(r, in)
			}
		}
		return r
	}
	copies := get("COPY")
	require.True(t, slices.ContainsFunc(copies, func(in instruction) bool {
		return in.args == "--from=build "+out+" /usr/local/bin/sluice"
	}), "the binary the build line makes is copied onto the PATH: %v", copies)
	users := get("USER")
	require.Len(t, users, 1)
	require.Equal(t, "65532:65532", users[0].args, "runs as the distroless nonroot user, never root")
	var entry []string
	require.Len(t, get("ENTRYPOINT"), 1)
	require.NoError(t, json.Unmarshal([]byte(get("ENTRYPOINT")[0].args), &entry), "ENTRYPOINT in exec form")
	require.Equal(t, []string{"sluice"}, entry)
	hc := get("HEALTHCHECK")
	require.Len(t, hc, 1)
	_, hcCmd, ok := strings.Cut(hc[0].args, "CMD ")
	require.True(t, ok)
	var probe []string
	require.NoError(t, json.Unmarshal([]byte(hcCmd), &probe), "HEALTHCHECK CMD in exec form: the image has no shell")
	require.Equal(t, []string{"sluice", "healthcheck"}, probe)
	require.True(t, slices.ContainsFunc(copies, func(in instruction) bool {
		return strings.Contains(in.args, "--chown=65532:65532") && strings.HasSuffix(in.args, " /var/lib/sluice")
	}), "/var/lib/sluice belongs to the runtime user, so a volume mounted there starts writable")
	require.True(t, slices.ContainsFunc(copies, func(in instruction) bool {
		return strings.Contains(in.args, "--chown=65532:65532") && strings.HasSuffix(in.args, " /etc/sluice/certs")
	}), "/etc/sluice/certs belongs to the runtime user, so docker-compose.tls.yml's certs service can write the certificates volume mounted there")

	// Run the line; the binary reports the version it was given.
	bin := buildSluice(t, testVersion)
	b, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Regexp(t, `(?m)^version: +`+regexp.QuoteMeta(testVersion)+`$`, string(b))
	require.Regexp(t, `(?m)^go: +go1\.26`, string(b))
	b, err = exec.Command(bin, "version", "-o", "json").CombinedOutput()
	require.NoError(t, err, "%s", b)
	var v struct{ Version, GoVersion string }
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	require.Equal(t, testVersion, v.Version)

	// Static: no dynamic loader named in the binary.
	elf := readFile(t, bin)
	require.NotContains(t, elf, "/lib64/ld-linux", "CGO_ENABLED=0 makes a static binary")
}

// TestDockerBuild builds the image where a Docker engine answers.
func TestDockerBuild(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker on PATH: the image is not built here (TestDockerfile checks the Dockerfile and runs its build line)")
	}
	if b, err := exec.Command(docker, "info").CombinedOutput(); err != nil {
		t.Skipf("docker info fails, no engine answers (TestDockerfile checks the Dockerfile and runs its build line): %v\n%s", err, b)
	}
	tag := "sluice-compose-test:" + strings.TrimPrefix(testVersion, "v")
	b, err := exec.Command(docker, "build", "--build-arg", "VERSION="+testVersion, "-t", tag, repoRoot(t)).CombinedOutput()
	require.NoError(t, err, "%s", b)
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", tag).Run() })
	b, err = exec.Command(docker, "run", "--rm", tag, "version").CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Contains(t, string(b), testVersion)
}
